//! `etcd://` and `etcds://`: the etcd revision-queue backend.

use std::sync::Arc;

use lock_core::Result;
use lock_etcd::{EtcdBackend, EtcdConfig};

use super::Services;
use crate::config::Config;

/// The etcd config for `url`, with the [`Config`] settings applied over it.
pub(super) fn etcd_config(url: &str, config: &Config) -> Result<EtcdConfig> {
    let mut etcd = EtcdConfig::from_url(url)?;
    if let Some(ttl) = config.ttl {
        etcd = etcd.with_default_ttl(ttl)?;
    }
    if let Some(timeout) = config.connect_timeout {
        etcd = etcd.with_connect_timeout(timeout);
    }
    if let Some(timeout) = config.request_timeout {
        etcd = etcd.with_request_timeout(timeout);
    }
    if let Some(prefix) = &config.prefix {
        etcd = etcd.with_prefix(prefix.clone());
    }
    if let Some(username) = &config.username {
        etcd.username = Some(username.clone());
    }
    if let Some(password) = &config.password {
        etcd.password = Some(password.clone());
    }
    if let Some(ca) = &config.tls.ca {
        etcd = etcd.with_ca_cert(ca.clone());
    }
    if let Some(cert) = &config.tls.cert {
        etcd.tls = true;
        etcd.client_cert = Some(cert.clone());
    }
    if let Some(key) = &config.tls.key {
        etcd.tls = true;
        etcd.client_key = Some(key.clone());
    }
    if config.fsync.is_some() {
        return Err(super::unsupported_setting("etcd", "fsync"));
    }
    if config.layout.is_some() {
        return Err(super::unsupported_setting("etcd", "layout"));
    }
    etcd.validate()?;
    Ok(etcd)
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = EtcdBackend::connect(etcd_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}
