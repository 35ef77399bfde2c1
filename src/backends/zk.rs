//! `zk://`: the ZooKeeper ephemeral-sequential backend.
//!
//! ZooKeeper leases belong to the session, so the TTL setting is the session
//! timeout, shared by every lock the client holds.

use std::sync::Arc;

use distlock_core::Result;
use distlock_zk::{ZkBackend, ZkConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

/// The ZooKeeper config for `url`, with the [`Config`] settings applied over it.
pub(super) fn zk_config(url: &str, config: &Config) -> Result<ZkConfig> {
    ZkConfig::from_url(url)?.with_settings(&config.settings())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = ZkBackend::connect(zk_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Native::guarded(backend)))
}

#[cfg(test)]
mod tests {
    use distlock_core::ErrorKind;

    use crate::Config;

    fn zk_config(layout: &str, prefix: Option<&str>) -> Config {
        // Nothing listens here: every case fails before any I/O.
        let mut config = Config::from_url("zk://127.0.0.1:1");
        config.set("layout", layout).unwrap();
        config.settings.prefix = prefix.map(str::to_owned);
        config
    }

    async fn refused(config: &Config) -> distlock_core::Error {
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
