//! One module per backend: turning the URL plus [`Config`] overrides into a
//! connected client. Network backends compile only with their feature.

use std::sync::Arc;

use distlock_core::{DynElectionBackend, Result};

use crate::config::Config;
use crate::guarded::Native;
use crate::scheme::Scheme;

#[cfg(feature = "etcd")]
mod etcd;
mod file;
mod memory;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "zk")]
mod zk;

#[cfg(all(
    test,
    feature = "etcd",
    feature = "redis",
    feature = "zk",
    feature = "postgres",
    feature = "mysql"
))]
mod every_option;

/// The client (it locks, and elects where its capabilities say so), and
/// the concrete client where the facade offers more (guarded writes).
pub(crate) type Services = (Arc<DynElectionBackend>, Native);

/// Connects the backend for `scheme`. The caller has checked that it is compiled in.
pub(crate) async fn connect(scheme: Scheme, url: &str, config: &Config) -> Result<Services> {
    match scheme {
        Scheme::Memory => memory::connect(url, config),
        Scheme::File => file::connect(url, config).await,
        #[cfg(feature = "etcd")]
        Scheme::Etcd | Scheme::Etcds => etcd::connect(url, config).await,
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::Rediss => redis::connect(url, config).await,
        #[cfg(feature = "redis")]
        Scheme::Redlock => redis::connect_redlock(url, config).await,
        #[cfg(feature = "redis")]
        Scheme::RedisCluster | Scheme::RedissCluster => redis::connect_cluster(url, config).await,
        #[cfg(feature = "zk")]
        Scheme::Zk => zk::connect(url, config).await,
        #[cfg(feature = "postgres")]
        Scheme::Postgres | Scheme::Postgresql => postgres::connect(url, config).await,
        #[cfg(feature = "mysql")]
        Scheme::Mysql | Scheme::Mariadb => mysql::connect(url, config).await,
        #[allow(unreachable_patterns)]
        other => {
            other.ensure_compiled_in()?;
            unreachable!("{other} is compiled in but has no connector")
        }
    }
}

#[cfg(test)]
mod tests {
    use distlock_core::ErrorKind;

    use crate::Config;

    /// A setting the backend would ignore is refused, naming the setting.
    #[tokio::test]
    async fn settings_a_backend_cannot_honour_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file_url = format!("file://{}", dir.path().display());
        let cases = [
            ("memory://", "prefix", "a"),
            ("memory://", "layout", "curator"),
            (file_url.as_str(), "prefix", "a"),
            (file_url.as_str(), "layout", "x"),
        ];
        for (url, setting, value) in cases {
            let mut config = Config::from_url(url);
            config.set(setting, value).unwrap();
            let err = crate::connect_with(&config).await.expect_err("refused");
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{url}: {err}");
            assert!(err.message().contains(setting), "{url}: {err}");
        }
    }
}
