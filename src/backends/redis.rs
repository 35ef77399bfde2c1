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

/// The Redis config for `url`, with the [`Config`] settings applied over it.
pub(super) fn redis_config(url: &str, config: &Config) -> Result<RedisConfig> {
    RedisConfig::from_url(url)?.with_settings(&config.settings())
}

/// The Redlock config for `url`, with the [`Config`] settings applied over it.
pub(super) fn redlock_config(url: &str, config: &Config) -> Result<RedlockConfig> {
    RedlockConfig::from_url(url)?.with_settings(&config.settings())
}

/// The Redis Cluster config for `url`, with the [`Config`] settings applied over it.
pub(super) fn cluster_config(url: &str, config: &Config) -> Result<RedisClusterConfig> {
    RedisClusterConfig::from_url(url)?.with_settings(&config.settings())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = RedisBackend::connect(redis_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Native::guarded(backend)))
}

pub(super) async fn connect_redlock(url: &str, config: &Config) -> Result<Services> {
    let backend = RedlockBackend::connect(redlock_config(url, config)?).await?;
    Ok((Arc::new(backend), Native::plain()))
}

pub(super) async fn connect_cluster(url: &str, config: &Config) -> Result<Services> {
    let backend = RedisClusterBackend::connect(cluster_config(url, config)?).await?;
    Ok((Arc::new(backend.clone()), Native::guarded(backend)))
}

#[cfg(test)]
mod tests {
    use distlock_core::ErrorKind;

    use crate::Config;

    /// Redlock waiters always race: `fair` from the URL, the file or the
    /// environment is refused before any connection, naming both.
    #[tokio::test]
    async fn redlock_refuses_fair_from_every_source() {
        // Nothing listens here: every case fails before any I/O.
        let servers = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
        let in_url = Config::from_url(format!("{servers}?fair=false"));
        let from_file = Config::from_toml_str(&format!("url = \"{servers}\"\nfair = false"));
        let from_env = Config::from_lookup(|key| match key {
            "DISTLOCK_URL" => Some(servers.to_owned()),
            "DISTLOCK_FAIR" => Some("false".to_owned()),
            _ => None,
        });
        for (source, config, kind) in [
            ("URL", in_url, ErrorKind::InvalidConfig),
            ("file", from_file.unwrap(), ErrorKind::Unsupported),
            ("environment", from_env.unwrap(), ErrorKind::Unsupported),
        ] {
            let err = crate::connect_with(&config).await.expect_err(source);
            assert_eq!(err.kind(), kind, "{source}: {err}");
            assert!(
                err.message()
                    .contains("Redlock backend has no fair setting"),
                "{source}: {err}"
            );
        }
    }
}

#[cfg(test)]
mod precedence {
    use std::time::Duration;

    use crate::Config;

    /// What the user wrote most specifically wins: a flag, then the URL's
    /// own option, then the environment, then the config file.
    #[test]
    fn a_flag_beats_the_url_which_beats_the_environment_which_beats_the_file() {
        let file = Config::from_toml_str(
            "url = \"redis://127.0.0.1:1\"\nttl = \"1s\"\nfair = true\nprefix = \"file:\"",
        )
        .unwrap();
        let env = |vars: &'static [(&'static str, &'static str)]| {
            Config::from_lookup(|key| {
                vars.iter()
                    .find(|(name, _)| *name == key)
                    .map(|(_, value)| value.to_string())
            })
            .unwrap()
        };
        let env = env(&[
            ("DISTLOCK_TTL", "2s"),
            ("DISTLOCK_FAIR", "true"),
            ("DISTLOCK_PREFIX", "env:"),
        ]);
        let merged = file.clone().overlay(env.clone());
        let resolved =
            |config: &Config| super::redis_config(&config.effective_url(), config).unwrap();
        let both = resolved(&merged);
        assert_eq!(
            both.common.default_ttl,
            Duration::from_secs(2),
            "env over file"
        );
        assert_eq!(both.common.prefix, "env:", "env over file");
        let with_url = Config {
            url: Some("redis://127.0.0.1:1?ttl=3s&fair=false".into()),
            ..merged
        };
        let url = resolved(&with_url);
        assert_eq!(
            url.common.default_ttl,
            Duration::from_secs(3),
            "URL over env"
        );
        assert!(!url.common.fair, "URL over env");
        assert_eq!(url.common.prefix, "env:", "what the URL leaves unsaid");
        let mut flagged = with_url;
        flagged.overrides.ttl = Some(Duration::from_secs(4));
        flagged.overrides.set("fair", "true").unwrap();
        let flag = resolved(&flagged);
        assert_eq!(
            flag.common.default_ttl,
            Duration::from_secs(4),
            "flag over URL"
        );
        assert!(flag.common.fair, "flag over URL");
        let file_only = resolved(&file);
        assert_eq!(file_only.common.default_ttl, Duration::from_secs(1));
    }
}
