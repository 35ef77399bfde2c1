//! Guarded writes through the facade: a write the backend's server commits
//! only while a lock (or leadership) is still held, checked in the same
//! transaction as the write: etcd (a Txn comparing the holder key's create
//! revision), ZooKeeper (a `multi` checking the lock node), Redis and Redis
//! Cluster (a Lua script checking the lock's owner and token). Redlock,
//! file and memory cannot; there these calls fail with `Unsupported`
//! naming the backend and saying why.

use std::any::Any;
use std::sync::Arc;

use distlock_core::{Error, GuardedWrites, Leadership, LockGuard, Result};

use crate::connect::Backend;

/// The concrete client behind a [`Backend`], kept where the facade offers
/// more than the core traits: its guarded writes, if it has them, and the
/// client itself for the accessors ([`Backend::redis`] and the others).
#[derive(Clone, Default)]
pub(crate) struct Native {
    client: Option<Arc<dyn Any + Send + Sync>>,
    guarded: Option<Arc<dyn GuardedWrites>>,
}

impl Native {
    /// A client with nothing beyond the core traits.
    pub(crate) fn plain() -> Self {
        Native::default()
    }

    /// `client`, for its accessor; it has no guarded writes.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        allow(dead_code, reason = "only the SQL backends have no guarded writes")
    )]
    pub(crate) fn of<T: Any + Send + Sync>(client: T) -> Self {
        Native {
            client: Some(Arc::new(client)),
            guarded: None,
        }
    }

    /// `client`, for its accessor and its guarded writes.
    #[cfg_attr(
        not(any(feature = "etcd", feature = "zk", feature = "redis")),
        allow(dead_code, reason = "no backend with guarded writes is compiled in")
    )]
    pub(crate) fn guarded<T: GuardedWrites + Clone>(client: T) -> Self {
        Native {
            client: Some(Arc::new(client.clone())),
            guarded: Some(Arc::new(client)),
        }
    }

    /// The client, if it is a `T`.
    #[cfg_attr(
        not(any(
            feature = "etcd",
            feature = "zk",
            feature = "redis",
            feature = "postgres",
            feature = "mysql"
        )),
        allow(dead_code, reason = "no backend with an accessor is compiled in")
    )]
    fn client<T: Any>(&self) -> Option<&T> {
        self.client.as_deref()?.downcast_ref()
    }
}

/// What a guarded write is guarded by: a lock guard or a leadership.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// A held lock.
    Lock(&'a LockGuard),
    /// A won election.
    Leader(&'a Leadership),
}

impl<'a> From<&'a LockGuard> for Owner<'a> {
    fn from(guard: &'a LockGuard) -> Self {
        Owner::Lock(guard)
    }
}

impl<'a> From<&'a Leadership> for Owner<'a> {
    fn from(leadership: &'a Leadership) -> Self {
        Owner::Leader(leadership)
    }
}

impl Owner<'_> {
    /// The guard behind the lock or the leadership.
    fn guard(&self) -> &LockGuard {
        match self {
            Owner::Lock(guard) => guard,
            Owner::Leader(leadership) => leadership.guard(),
        }
    }

    /// The backend key (or node path) of the acquisition.
    pub fn key(&self) -> &str {
        self.guard().key()
    }

    /// The acquisition's fencing token.
    pub fn token(&self) -> distlock_core::FencingToken {
        self.guard().token()
    }

    /// Whether this process still believes it holds the lock.
    pub fn is_held(&self) -> bool {
        self.guard().is_held()
    }

    fn describe(&self) -> String {
        let what = match self {
            Owner::Lock(_) => "lock",
            Owner::Leader(_) => "leadership of",
        };
        format!("{what} {} (token {})", self.guard().name(), self.token())
    }
}

impl Backend {
    /// Whether guarded writes ([`guarded_put`](Self::guarded_put),
    /// [`guarded_delete`](Self::guarded_delete), [`is_owner`](Self::is_owner))
    /// work on this backend: etcd, ZooKeeper, Redis and Redis Cluster, as
    /// [`Capabilities::guarded_writes`](distlock_core::Capabilities::guarded_writes)
    /// says.
    pub fn has_guarded_writes(&self) -> bool {
        self.capabilities().guarded_writes && self.native().guarded.is_some()
    }

    /// The single-server Redis client behind this backend, for
    /// [`guarded_eval`](distlock_redis::RedisBackend::guarded_eval) of scripts
    /// of your own; `None` on other backends.
    #[cfg(feature = "redis")]
    pub fn redis(&self) -> Option<&distlock_redis::RedisBackend> {
        self.native().client()
    }

    /// The Redis Cluster client behind this backend, for
    /// [`guarded_eval`](distlock_redis::RedisClusterBackend::guarded_eval);
    /// `None` on other backends.
    #[cfg(feature = "redis")]
    pub fn redis_cluster(&self) -> Option<&distlock_redis::RedisClusterBackend> {
        self.native().client()
    }

    /// The etcd client behind this backend, for transactions of your own
    /// with [`distlock_etcd::is_owner_of`]; `None` on other backends.
    #[cfg(feature = "etcd")]
    pub fn etcd(&self) -> Option<&distlock_etcd::EtcdBackend> {
        self.native().client()
    }

    /// The PostgreSQL client behind this backend, for fenced transactions
    /// ([`distlock_postgres::PostgresBackend::fenced_transaction`]): SQL that
    /// commits only while a guard holds its lock; `None` on other backends.
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&distlock_postgres::PostgresBackend> {
        self.native().client()
    }

    /// The MySQL/MariaDB client behind this backend, for fenced
    /// transactions ([`distlock_mysql::MysqlBackend::fenced_transaction`]):
    /// SQL that commits only while a guard holds its lock; `None` on other
    /// backends.
    #[cfg(feature = "mysql")]
    pub fn mysql(&self) -> Option<&distlock_mysql::MysqlBackend> {
        self.native().client()
    }

    /// The ZooKeeper client behind this backend, for multi-operation
    /// [`distlock_zk::GuardedWrite`]s; `None` on other backends.
    #[cfg(feature = "zk")]
    pub fn zk(&self) -> Option<&distlock_zk::ZkBackend> {
        self.native().client()
    }

    /// Writes `value` at `key` (an etcd key; a ZooKeeper absolute path whose
    /// parent exists; a Redis key, which on a Redis Cluster must share the
    /// lock's `{name}` hash tag) only while `owner` still holds its lock,
    /// checked by the server atomically with the write.
    ///
    /// Fails with `LeaseLost`, writing nothing, once the lock is gone or
    /// belongs to a newer acquisition; with `Unavailable` or `Timeout` when
    /// the reply was lost (the write may or may not have committed); with
    /// `InvalidConfig` for a Redis Cluster key outside the lock's hash tag;
    /// with `Unsupported` naming the backend on Redlock, file and memory,
    /// which cannot check ownership in the write: pass the fencing token to
    /// the storage instead ([`crate::fence`]).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled put may or may not have been committed
    /// (atomically, and only while the lock was held).
    pub async fn guarded_put<'a>(
        &self,
        owner: impl Into<Owner<'a>>,
        key: &str,
        value: impl Into<Vec<u8>>,
    ) -> Result<()> {
        let owner = owner.into();
        match &self.native().guarded {
            Some(guarded) => guarded.guarded_put(owner.guard(), key, value.into()).await,
            None => Err(self.no_guarded_writes("guarded_put", &owner)),
        }
    }

    /// Deletes `key` only while `owner` still holds its lock, checked by
    /// the server atomically with the delete, as
    /// [`guarded_put`](Self::guarded_put). Returns whether the key existed
    /// (a missing key is no error, but the lock is checked all the same).
    ///
    /// Fails as [`guarded_put`](Self::guarded_put).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled delete may or may not have been
    /// committed (atomically, and only while the lock was held).
    pub async fn guarded_delete<'a>(&self, owner: impl Into<Owner<'a>>, key: &str) -> Result<bool> {
        let owner = owner.into();
        match &self.native().guarded {
            Some(guarded) => guarded.guarded_delete(owner.guard(), key).await,
            None => Err(self.no_guarded_writes("guarded_delete", &owner)),
        }
    }

    /// Asks the server whether `owner` still holds its lock (etcd: its key
    /// exists with its create revision; ZooKeeper: its lock node exists;
    /// Redis: its owner key's holder record carries this acquisition's token).
    /// A `true` may be stale by the time it is read; to act on it, use
    /// [`guarded_put`](Self::guarded_put).
    ///
    /// Fails with `Unsupported` naming the backend where ownership cannot
    /// be checked on the server (Redlock, file, memory).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_owner<'a>(&self, owner: impl Into<Owner<'a>>) -> Result<bool> {
        let owner = owner.into();
        match &self.native().guarded {
            Some(guarded) => guarded.is_owner(owner.guard()).await,
            None => Err(self.no_guarded_writes("is_owner", &owner)),
        }
    }

    fn no_guarded_writes(&self, operation: &str, owner: &Owner<'_>) -> Error {
        let backend = self.capabilities().backend;
        let why = match backend {
            "redlock" => {
                "its lock is held on a majority of independent servers, and no single server \
                 can check that majority atomically with a write"
            }
            "postgres" => {
                "its guarded writes are SQL: run them in a fenced transaction \
                 (Backend::postgres, then PostgresBackend::fenced_transaction)"
            }
            "mysql" => {
                "its guarded writes are SQL: run them in a fenced transaction \
                 (Backend::mysql, then MysqlBackend::fenced_transaction)"
            }
            _ => "only etcd, zk, redis and redis-cluster do",
        };
        Error::unsupported(format!(
            "{operation} for {}: the {backend} backend ({}) has no guarded writes: {why}; \
             pass the fencing token to the storage you write to instead (distlock::fence)",
            owner.describe(),
            self.description()
        ))
        .with_site(backend, operation.to_owned())
    }
}
