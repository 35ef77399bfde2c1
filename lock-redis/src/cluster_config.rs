//! Configuration of the Redis Cluster backend, from a struct or a
//! `redis+cluster://` URL.

use std::fmt;
use std::time::Duration;

use distlock_core::raw::{ClientFields, Settings, redact_url};
use distlock_core::{ClientConfig, Error, Result};
use serde::{Deserialize, Serialize};

use crate::config::{
    CommonConfig, SETTINGS, ServerAddr, check_server_list, common_builders, fair_builder,
};
use crate::url;

/// Configuration of [`RedisClusterBackend`](crate::RedisClusterBackend): a
/// Redis Cluster, reached through any of its seed nodes.
///
/// URL form:
/// `redis+cluster://[user][:password@]h1[:port],h2[:port],...[?option=value&...]`,
/// or `rediss+cluster://` for TLS, with the options of
/// [`RedisConfig`](crate::RedisConfig). The seeds are only where the client
/// starts: it learns every master from the cluster and follows its
/// redirections. A cluster has only database 0, so the URL has no `/db`.
///
/// ```
/// use distlock_redis::RedisClusterConfig;
/// let config = RedisClusterConfig::from_url("redis+cluster://h1:7000,h2:7001?prefix=jobs:").unwrap();
/// assert_eq!(config.nodes.len(), 2);
/// assert!(RedisClusterConfig::from_url("redis+cluster://h1:7000/3").is_err());
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RedisClusterConfig {
    /// Seed nodes: any nodes of the cluster, masters or replicas.
    pub nodes: Vec<ServerAddr>,
    /// Credentials, TLS, prefix, TTL and timeouts; `db` must stay 0.
    #[serde(flatten)]
    pub common: CommonConfig,
}

impl RedisClusterConfig {
    /// A config for the given seed nodes with every other setting at its
    /// default.
    pub fn new(nodes: impl IntoIterator<Item = ServerAddr>) -> Self {
        RedisClusterConfig {
            nodes: nodes.into_iter().collect(),
            common: CommonConfig::default(),
        }
    }

    /// Parses a `redis+cluster://` or `rediss+cluster://` URL.
    ///
    /// Fails with `InvalidConfig` naming what is wrong: no host, a database
    /// number, a node listed twice, an unknown option or a bad value.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = url::parse(url, &["redis+cluster", "rediss+cluster"])?;
        if let Some(db) = parsed.db {
            return Err(Error::invalid_config(format!(
                "redis URL {}: database number {db} in the path; a Redis Cluster has only database 0, so a redis+cluster:// URL takes no /db",
                redact_url(url)
            )));
        }
        let mut config = RedisClusterConfig {
            nodes: parsed.hosts.clone(),
            common: CommonConfig::default(),
        };
        config.common.apply(parsed)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every field that can be checked without a network call.
    pub fn validate(&self) -> Result<()> {
        check_server_list(
            &self.nodes,
            "redis cluster needs at least one seed node (redis+cluster://h1:7000,h2:7001)",
            "redis cluster node {} is listed twice",
        )?;
        if self.common.db != 0 {
            return Err(Error::invalid_config(format!(
                "redis cluster database number {}: a Redis Cluster has only database 0",
                self.common.db
            )));
        }
        crate::config::refuse_plain(&self.common, "a Redis Cluster")?;
        self.common.validate()
    }

    common_builders!("Redis Cluster", SETTINGS);
    fair_builder!();
}

impl ClientConfig for RedisClusterConfig {
    fn client_fields(&mut self) -> ClientFields<'_> {
        self.common.client_fields()
    }
}

impl fmt::Debug for RedisClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RedisClusterConfig");
        s.field("nodes", &self.nodes);
        self.common.debug_fields(&mut s);
        s.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn cluster_url_lists_seeds_and_options() {
        let c =
            RedisClusterConfig::from_url("rediss+cluster://u:hunter2@h1:7000,h2?prefix=p:&ttl=2s")
                .unwrap();
        assert_eq!(
            c.nodes,
            vec![ServerAddr::new("h1", 7000), ServerAddr::new("h2", 6379)]
        );
        assert!(c.common.tls.enabled);
        assert_eq!(c.common.db, 0);
        assert_eq!(c.common.prefix, "p:");
        assert_eq!(c.common.default_ttl, Duration::from_secs(2));
        assert!(!format!("{c:?}").contains("hunter2"));
        let plain = RedisClusterConfig::from_url("redis+cluster://h1").unwrap();
        assert!(!plain.common.tls.enabled);
    }

    #[test]
    fn bad_cluster_urls_are_invalid_config_naming_the_problem() {
        let cases = [
            ("redis+cluster://", "no host"),
            ("redis+cluster:///0", "no host"),
            ("redis+cluster://h1:7000,h2:7001/0", "only database 0"),
            ("redis+cluster://h1:7000/2", "database number 2"),
            ("redis+cluster://h1:7000/x", "not a number"),
            ("redis+cluster://h1:7000,h1:7000", "listed twice"),
            ("redis+cluster://h1:7000?colour=blue", "colour"),
            ("redis+cluster://:hunter2@h1:notaport", "port"),
            ("redis://h1:7000", "scheme"),
        ];
        for (url, needle) in cases {
            let err = RedisClusterConfig::from_url(url).expect_err(url);
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
            assert!(err.to_string().contains(needle), "{url}: {err}");
            assert!(!err.to_string().contains("hunter2"), "{url}: {err}");
        }
        let err = RedisClusterConfig::new([ServerAddr::new("h", 1)])
            .with_settings(&Settings::default())
            .map(|c| RedisClusterConfig {
                common: CommonConfig { db: 1, ..c.common },
                ..c
            })
            .and_then(|c| c.validate())
            .unwrap_err();
        assert!(err.to_string().contains("only database 0"), "{err}");
    }
}
