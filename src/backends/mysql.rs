//! `mysql://` and `mariadb://`: the MySQL/MariaDB backend, a queue table
//! judged by the server's clock (or `layout=named`, the server's named
//! locks shared with other clients).

use std::sync::Arc;

use distlock_core::Result;
use distlock_mysql::{MysqlBackend, MysqlConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let mysql = MysqlConfig::from_url(url)?.with_settings(&config.settings())?;
    let backend = MysqlBackend::connect(mysql).await?;
    Ok((Arc::new(backend.clone()), Native::Mysql(backend)))
}
