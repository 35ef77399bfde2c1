//! `redis://`, `rediss://` (one server), `redlock://` (a quorum of
//! independent servers) and `redis+cluster://`, `rediss+cluster://` (a
//! Redis Cluster).

use std::sync::Arc;

use distlock_core::Result;
use distlock_redis::{
    RedisBackend, RedisClusterBackend, RedisClusterConfig, RedisConfig, RedlockBackend,
    RedlockConfig,
};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let redis = RedisConfig::from_url(url)?.with_settings(&config.settings())?;
    let backend = RedisBackend::connect(redis).await?;
    Ok((Arc::new(backend.clone()), Native::Redis(backend)))
}

pub(super) async fn connect_redlock(url: &str, config: &Config) -> Result<Services> {
    let redlock = RedlockConfig::from_url(url)?.with_settings(&config.settings())?;
    let backend = RedlockBackend::connect(redlock).await?;
    Ok((Arc::new(backend), Native::Plain))
}

pub(super) async fn connect_cluster(url: &str, config: &Config) -> Result<Services> {
    let cluster = RedisClusterConfig::from_url(url)?.with_settings(&config.settings())?;
    let backend = RedisClusterBackend::connect(cluster).await?;
    Ok((Arc::new(backend.clone()), Native::RedisCluster(backend)))
}
