//! `mysql://` and `mariadb://`: the MySQL/MariaDB backend, a queue table
//! judged by the server's clock (or `layout=named`, the server's named
//! locks shared with other clients).

use std::sync::Arc;

use distlock_core::Result;
use distlock_mysql::{MysqlBackend, MysqlConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

/// The MySQL config for `url`, with the [`Config`] settings applied over it.
pub(super) fn mysql_config(url: &str, config: &Config) -> Result<MysqlConfig> {
    MysqlConfig::from_url(url)?.with_settings(&config.settings())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = MysqlBackend::connect(mysql_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Native::of(backend)))
}
