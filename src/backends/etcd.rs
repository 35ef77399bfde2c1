//! `etcd://` and `etcds://`: the etcd revision-queue backend.

use std::sync::Arc;

use distlock_core::Result;
use distlock_etcd::{EtcdBackend, EtcdConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

/// The etcd config for `url`, with the [`Config`] settings applied over it.
pub(super) fn etcd_config(url: &str, config: &Config) -> Result<EtcdConfig> {
    EtcdConfig::from_url(url)?.with_settings(&config.settings())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = EtcdBackend::connect(etcd_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Native::guarded(backend)))
}

#[cfg(test)]
mod tests {
    use distlock_core::ErrorKind;
    use distlock_etcd::KeyLayout;

    use super::*;

    fn with_layout(layout: &str) -> Config {
        let mut config = Config::default();
        config.set("layout", layout).unwrap();
        config
    }

    #[test]
    fn the_layout_setting_selects_the_etcd_key_layout() {
        let url = "etcd://127.0.0.1:2379";
        let plain = etcd_config(url, &Config::default()).unwrap();
        assert_eq!(plain.layout, KeyLayout::Distlock);
        let go = etcd_config(url, &with_layout("concurrency")).unwrap();
        assert_eq!(go.layout, KeyLayout::Concurrency);
        let back = etcd_config(
            &format!("{url}?layout=concurrency"),
            &with_layout("distlock"),
        );
        assert_eq!(back.unwrap().layout, KeyLayout::Distlock);
    }

    #[test]
    fn an_unknown_layout_or_a_prefix_with_concurrency_is_invalid_config() {
        let url = "etcd://127.0.0.1:2379";
        for unknown in ["curator", "Concurrency"] {
            let err = etcd_config(url, &with_layout(unknown)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            assert!(
                err.message().contains(unknown)
                    && err.message().contains("known: distlock, concurrency"),
                "{err}"
            );
        }
        let mut config = with_layout("concurrency");
        config.settings.prefix = Some("/app".into());
        let err = etcd_config(url, &config).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.message().contains("layout=concurrency"), "{err}");
    }
}
