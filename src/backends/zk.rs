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
    if let Some(layout) = &config.layout {
        // `distlock` or `curator`; anything else (etcd's `concurrency`, say)
        // is InvalidConfig listing both.
        zk = zk.with_layout(layout.parse()?);
    }
    let backend = ZkBackend::connect(zk).await?;
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}

#[cfg(test)]
mod tests {
    use lock_core::ErrorKind;

    use crate::Config;

    fn zk_config(layout: &str, prefix: Option<&str>) -> Config {
        Config {
            // Nothing listens here: every case fails before any I/O.
            url: Some("zk://127.0.0.1:1".to_owned()),
            layout: Some(layout.to_owned()),
            prefix: prefix.map(str::to_owned),
            ..Config::default()
        }
    }

    async fn refused(config: &Config) -> lock_core::Error {
        match crate::connect_with(config).await {
            Ok(_) => panic!("{config:?} was accepted"),
            Err(err) => err,
        }
    }

    /// The layout setting is parsed; an unknown one names the known ones.
    #[tokio::test]
    async fn layout_setting_is_checked_before_connecting() {
        for layout in ["concurrency", "Curator", ""] {
            let err = refused(&zk_config(layout, None)).await;
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{layout:?}: {err}");
            assert!(
                err.message().contains("distlock, curator"),
                "{layout:?}: {err}"
            );
        }
        let err = refused(&zk_config("curator", Some("/app"))).await;
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.message().contains("layout=curator"), "{err}");
    }
}
