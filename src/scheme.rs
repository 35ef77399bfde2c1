//! URL schemes: always all known, whichever backends are compiled in.

use std::fmt;

use distlock_core::{Error, Result};

/// A backend URL scheme. This enum is never feature-gated: a URL for a
/// backend that is not compiled in is still recognised, and refused with an
/// error that names the cargo feature to enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `memory://[NAME]`: in this process only (always available).
    Memory,
    /// `file:///DIR`: lock files shared by the processes of one machine (always available).
    File,
    /// `etcd://host:port[,host:port...][/prefix]` (feature `etcd`).
    Etcd,
    /// `etcds://...`: etcd over TLS (feature `etcd`).
    Etcds,
    /// `redis://[user:password@]host:port[/db]` (feature `redis`).
    Redis,
    /// `rediss://...`: Redis over TLS (feature `redis`).
    Rediss,
    /// `redlock://host:port,host:port,host:port`: quorum over independent Redis servers (feature `redis`).
    Redlock,
    /// `redis+cluster://host:port,host:port,...`: a Redis Cluster, through its seed nodes (feature `redis`).
    RedisCluster,
    /// `rediss+cluster://...`: a Redis Cluster over TLS (feature `redis`).
    RedissCluster,
    /// `zk://host:port[,host:port...][/chroot]` (feature `zk`).
    Zk,
    /// `postgres://[user:password@]host:port/db` (feature `postgres`).
    Postgres,
    /// `postgresql://...`: the same as `postgres://` (feature `postgres`).
    Postgresql,
    /// `mysql://[user:password@]host:port/db` (feature `mysql`).
    Mysql,
    /// `mariadb://...`: the same as `mysql://` (feature `mysql`).
    Mariadb,
}

impl Scheme {
    /// Every scheme, in the order they are listed in messages.
    pub const ALL: [Scheme; 14] = [
        Scheme::Memory,
        Scheme::File,
        Scheme::Etcd,
        Scheme::Etcds,
        Scheme::Redis,
        Scheme::Rediss,
        Scheme::Redlock,
        Scheme::RedisCluster,
        Scheme::RedissCluster,
        Scheme::Zk,
        Scheme::Postgres,
        Scheme::Postgresql,
        Scheme::Mysql,
        Scheme::Mariadb,
    ];

    /// The scheme as written in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Memory => "memory",
            Scheme::File => "file",
            Scheme::Etcd => "etcd",
            Scheme::Etcds => "etcds",
            Scheme::Redis => "redis",
            Scheme::Rediss => "rediss",
            Scheme::Redlock => "redlock",
            Scheme::RedisCluster => "redis+cluster",
            Scheme::RedissCluster => "rediss+cluster",
            Scheme::Zk => "zk",
            Scheme::Postgres => "postgres",
            Scheme::Postgresql => "postgresql",
            Scheme::Mysql => "mysql",
            Scheme::Mariadb => "mariadb",
        }
    }

    /// The cargo feature of `distlock` that compiles this backend in, if any.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Scheme::Memory | Scheme::File => None,
            Scheme::Etcd | Scheme::Etcds => Some("etcd"),
            Scheme::Redis
            | Scheme::Rediss
            | Scheme::Redlock
            | Scheme::RedisCluster
            | Scheme::RedissCluster => Some("redis"),
            Scheme::Zk => Some("zk"),
            Scheme::Postgres | Scheme::Postgresql => Some("postgres"),
            Scheme::Mysql | Scheme::Mariadb => Some("mysql"),
        }
    }

    /// Whether this build of distlock includes the backend.
    pub fn is_compiled_in(self) -> bool {
        match self {
            Scheme::Memory | Scheme::File => true,
            Scheme::Etcd | Scheme::Etcds => cfg!(feature = "etcd"),
            Scheme::Redis
            | Scheme::Rediss
            | Scheme::Redlock
            | Scheme::RedisCluster
            | Scheme::RedissCluster => cfg!(feature = "redis"),
            Scheme::Zk => cfg!(feature = "zk"),
            Scheme::Postgres | Scheme::Postgresql => cfg!(feature = "postgres"),
            Scheme::Mysql | Scheme::Mariadb => cfg!(feature = "mysql"),
        }
    }

    /// The scheme of `url`: `InvalidConfig` if the URL has no `scheme://`
    /// or the scheme is unknown (the message lists the known ones).
    pub fn of_url(url: &str) -> Result<Scheme> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Error::invalid_config(format!(
                "malformed backend URL {:?}: expected SCHEME://..., e.g. file:///var/lib/distlock, \
                 etcd://127.0.0.1:2379 or redis://127.0.0.1:6379; known schemes: {}",
                crate::redact::redact_url(url),
                known_list()
            )));
        };
        let lower = scheme.to_ascii_lowercase();
        Scheme::ALL
            .into_iter()
            .find(|s| s.as_str() == lower)
            .ok_or_else(|| {
                Error::invalid_config(format!(
                    "unknown URL scheme {scheme:?} in {:?}; known schemes: {}",
                    crate::redact::redact_url(url),
                    known_list()
                ))
            })
    }

    /// `Unsupported` naming the feature to enable, if the backend is not compiled in.
    pub fn ensure_compiled_in(self) -> Result<()> {
        match self.feature() {
            Some(feature) if !self.is_compiled_in() => Err(Error::unsupported(format!(
                "the {} backend is not compiled in; enable the `{feature}` feature of distlock \
                 (cargo build --features {feature}, or --features full)",
                self.backend_name()
            ))),
            _ => Ok(()),
        }
    }

    fn backend_name(self) -> &'static str {
        match self {
            Scheme::Memory => "memory",
            Scheme::File => "file",
            Scheme::Etcd | Scheme::Etcds => "etcd",
            Scheme::Redis | Scheme::Rediss => "Redis",
            Scheme::Redlock => "Redlock",
            Scheme::RedisCluster | Scheme::RedissCluster => "Redis Cluster",
            Scheme::Zk => "ZooKeeper",
            Scheme::Postgres | Scheme::Postgresql => "PostgreSQL",
            Scheme::Mysql | Scheme::Mariadb => "MySQL",
        }
    }
}

fn known_list() -> String {
    Scheme::ALL
        .iter()
        .map(|s| format!("{}://", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn every_scheme_is_recognised() {
        for scheme in Scheme::ALL {
            let url = format!("{}://x", scheme.as_str());
            assert_eq!(Scheme::of_url(&url).unwrap(), scheme);
        }
        assert_eq!(Scheme::of_url("ETCD://h:1").unwrap(), Scheme::Etcd);
    }

    #[test]
    fn unknown_scheme_lists_the_known_ones() {
        let err = Scheme::of_url("consul://h:8500").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("\"consul\""), "{err}");
        assert!(
            err.message().contains("etcd://, etcds://, redis://"),
            "{err}"
        );
    }

    #[test]
    fn url_without_scheme_is_malformed_and_redacted() {
        let err = Scheme::of_url("user:secret@host:6379").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().starts_with("malformed backend URL"), "{err}");
        assert!(!err.message().contains("secret"), "{err}");
    }

    #[test]
    fn missing_feature_names_it() {
        for scheme in Scheme::ALL {
            match (scheme.is_compiled_in(), scheme.ensure_compiled_in()) {
                (true, Ok(())) => {}
                (false, Err(e)) => {
                    assert_eq!(e.kind(), ErrorKind::Unsupported);
                    let feature = scheme.feature().unwrap();
                    assert!(e.message().contains(&format!("`{feature}` feature")), "{e}");
                }
                (compiled, result) => panic!("{scheme}: compiled {compiled}, {result:?}"),
            }
        }
    }
}
