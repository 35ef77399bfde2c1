//! `zk://`: the ZooKeeper ephemeral-sequential backend.
//!
//! ZooKeeper leases belong to the session, so the TTL setting is the session
//! timeout, shared by every lock the client holds.

use std::sync::Arc;

use lock_core::Result;
use lock_zk::{ZkBackend, ZkConfig};

use super::{Services, unsupported_setting};
use crate::config::Config;

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let mut zk = ZkConfig::from_url(url)?;
    if let Some(ttl) = config.ttl {
        lock_core::check_ttl(ttl)?;
        zk = zk.with_session_timeout(ttl);
    }
    if let Some(timeout) = config.connect_timeout {
        zk = zk.with_connect_timeout(timeout);
    }
    if let Some(timeout) = config.request_timeout {
        zk = zk.with_request_timeout(timeout);
    }
    if let Some(prefix) = &config.prefix {
        zk = zk.with_prefix(prefix.clone());
    }
    if let Some(username) = &config.username {
        zk.username = Some(username.clone());
    }
    if let Some(password) = &config.password {
        zk.password = Some(password.clone());
    }
    if !config.tls.is_empty() {
        return Err(unsupported_setting("ZooKeeper", "TLS"));
    }
    if config.fsync.is_some() {
        return Err(unsupported_setting("ZooKeeper", "fsync"));
    }
    if config.layout.is_some() {
        return Err(unsupported_setting("ZooKeeper", "layout"));
    }
    let backend = ZkBackend::connect(zk).await?;
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}
