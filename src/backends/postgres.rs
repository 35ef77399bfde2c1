//! `postgres://` and `postgresql://`: the PostgreSQL backend, a queue table
//! judged by the server's clock (or `layout=advisory`, session advisory
//! locks shared with other clients).

use std::sync::Arc;

use distlock_core::Result;
use distlock_postgres::{PostgresBackend, PostgresConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

/// The PostgreSQL config for `url`, with the [`Config`] settings applied over it.
pub(super) fn postgres_config(url: &str, config: &Config) -> Result<PostgresConfig> {
    PostgresConfig::from_url(url)?.with_settings(&config.settings())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = PostgresBackend::connect(postgres_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Native::of(backend)))
}
