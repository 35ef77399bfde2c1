//! `redis://`, `rediss://` (one server) and `redlock://` (a quorum of
//! independent servers).

use std::sync::Arc;

use lock_core::Result;
use lock_redis::{CommonConfig, RedisBackend, RedisConfig, RedlockBackend, RedlockConfig};

use super::{Services, unsupported_setting};
use crate::config::Config;

/// Applies the [`Config`] settings over the URL's.
fn apply(common: &mut CommonConfig, config: &Config) -> Result<()> {
    if let Some(ttl) = config.ttl {
        lock_core::check_ttl(ttl)?;
        common.default_ttl = ttl;
    }
    if let Some(timeout) = config.connect_timeout {
        common.connect_timeout = timeout;
    }
    if let Some(timeout) = config.request_timeout {
        common.request_timeout = timeout;
    }
    if let Some(prefix) = &config.prefix {
        common.prefix = prefix.clone();
    }
    if let Some(username) = &config.username {
        common.username = Some(username.clone());
    }
    if let Some(password) = &config.password {
        common.password = Some(password.clone());
    }
    if let Some(ca) = &config.tls.ca {
        common.tls.enabled = true;
        common.tls.ca_file = Some(ca.clone());
    }
    if config.tls.cert.is_some() || config.tls.key.is_some() {
        return Err(unsupported_setting(
            "Redis",
            "client certificate (tls.cert / tls.key); only tls.ca is supported",
        ));
    }
    if config.fsync.is_some() {
        return Err(unsupported_setting("Redis", "fsync"));
    }
    if config.layout.is_some() {
        return Err(unsupported_setting("Redis", "layout"));
    }
    Ok(())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let mut redis = RedisConfig::from_url(url)?;
    apply(&mut redis.common, config)?;
    let backend = RedisBackend::connect(redis).await?;
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}

pub(super) async fn connect_redlock(url: &str, config: &Config) -> Result<Services> {
    let mut redlock = RedlockConfig::from_url(url)?;
    apply(&mut redlock.common, config)?;
    let backend = RedlockBackend::connect(redlock).await?;
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}
