//! Guarded writes through the facade: a write the backend's server commits
//! only while a lock (or leadership) is still held, checked in the same
//! transaction as the write: etcd (a Txn comparing the holder key's create
//! revision), ZooKeeper (a `multi` checking the lock node), Redis and Redis
//! Cluster (a Lua script checking the lock's owner and token). Redlock,
//! file and memory cannot; there these calls fail with `Unsupported`
//! naming the backend and saying why.

use lock_core::{Error, Leadership, LockGuard, Result};

use crate::connect::Backend;

/// The concrete client behind a [`Backend`], kept where the facade offers
/// more than the core traits.
#[derive(Clone, Default)]
pub(crate) enum Native {
    /// Nothing beyond the core traits.
    #[default]
    Plain,
    #[cfg(feature = "etcd")]
    Etcd(lock_etcd::EtcdBackend),
    #[cfg(feature = "zk")]
    Zk(lock_zk::ZkBackend),
    #[cfg(feature = "redis")]
    Redis(lock_redis::RedisBackend),
    #[cfg(feature = "redis")]
    RedisCluster(lock_redis::RedisClusterBackend),
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
    pub fn token(&self) -> lock_core::FencingToken {
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
    /// [`Capabilities::guarded_writes`](lock_core::Capabilities::guarded_writes)
    /// says.
    pub fn has_guarded_writes(&self) -> bool {
        self.capabilities().guarded_writes && !matches!(self.native(), Native::Plain)
    }

    /// The single-server Redis client behind this backend, for
    /// [`guarded_eval`](lock_redis::RedisBackend::guarded_eval) of scripts
    /// of your own; `None` on other backends.
    #[cfg(feature = "redis")]
    pub fn redis(&self) -> Option<&lock_redis::RedisBackend> {
        match self.native() {
            Native::Redis(redis) => Some(redis),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The Redis Cluster client behind this backend, for
    /// [`guarded_eval`](lock_redis::RedisClusterBackend::guarded_eval);
    /// `None` on other backends.
    #[cfg(feature = "redis")]
    pub fn redis_cluster(&self) -> Option<&lock_redis::RedisClusterBackend> {
        match self.native() {
            Native::RedisCluster(cluster) => Some(cluster),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The etcd client behind this backend, for transactions of your own
    /// with [`lock_etcd::is_owner_of`]; `None` on other backends.
    #[cfg(feature = "etcd")]
    pub fn etcd(&self) -> Option<&lock_etcd::EtcdBackend> {
        match self.native() {
            Native::Etcd(etcd) => Some(etcd),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The ZooKeeper client behind this backend, for multi-operation
    /// [`lock_zk::GuardedWrite`]s; `None` on other backends.
    #[cfg(feature = "zk")]
    pub fn zk(&self) -> Option<&lock_zk::ZkBackend> {
        match self.native() {
            Native::Zk(zk) => Some(zk),
            #[allow(unreachable_patterns)]
            _ => None,
        }
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
        match self.native() {
            #[cfg(feature = "etcd")]
            Native::Etcd(etcd) => etcd_impl::put(etcd, owner, key, value.into()).await,
            #[cfg(feature = "zk")]
            Native::Zk(zk) => zk_impl::put(zk, owner, key, value.into()).await,
            #[cfg(feature = "redis")]
            Native::Redis(redis) => redis.guarded_put(owner.guard(), key, value.into()).await,
            #[cfg(feature = "redis")]
            Native::RedisCluster(cluster) => {
                cluster.guarded_put(owner.guard(), key, value.into()).await
            }
            Native::Plain => {
                let _ = (key, value);
                Err(self.no_guarded_writes("guarded_put", &owner))
            }
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
        match self.native() {
            #[cfg(feature = "etcd")]
            Native::Etcd(etcd) => etcd_impl::delete(etcd, owner, key).await,
            #[cfg(feature = "zk")]
            Native::Zk(zk) => zk_impl::delete(zk, owner, key).await,
            #[cfg(feature = "redis")]
            Native::Redis(redis) => redis.guarded_delete(owner.guard(), key).await,
            #[cfg(feature = "redis")]
            Native::RedisCluster(cluster) => cluster.guarded_delete(owner.guard(), key).await,
            Native::Plain => {
                let _ = key;
                Err(self.no_guarded_writes("guarded_delete", &owner))
            }
        }
    }

    /// Asks the server whether `owner` still holds its lock (etcd: its key
    /// exists with its create revision; ZooKeeper: its lock node exists;
    /// Redis: its owner key and holder record name this acquisition).
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
        match self.native() {
            #[cfg(feature = "etcd")]
            Native::Etcd(etcd) => etcd_impl::is_owner(etcd, owner).await,
            #[cfg(feature = "zk")]
            Native::Zk(zk) => zk_impl::is_owner(zk, owner).await,
            #[cfg(feature = "redis")]
            Native::Redis(redis) => redis.is_owner(owner.guard()).await,
            #[cfg(feature = "redis")]
            Native::RedisCluster(cluster) => cluster.is_owner(owner.guard()).await,
            Native::Plain => Err(self.no_guarded_writes("is_owner", &owner)),
        }
    }

    fn no_guarded_writes(&self, operation: &str, owner: &Owner<'_>) -> Error {
        let backend = self.capabilities().backend;
        let why = match backend {
            "redlock" => {
                "its lock is held on a majority of independent servers, and no single server \
                 can check that majority atomically with a write"
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

#[cfg(feature = "etcd")]
mod etcd_impl {
    use lock_core::{Error, Result};
    use lock_etcd::EtcdBackend;
    use lock_etcd::etcd_client::{self, Txn, TxnOp};

    use super::Owner;

    fn revision(owner: &Owner<'_>) -> i64 {
        i64::try_from(owner.token().get()).unwrap_or(i64::MAX)
    }

    fn failed(action: &str, owner: &Owner<'_>, e: etcd_client::Error, in_doubt: bool) -> Error {
        let doubt = if in_doubt {
            "; the write may or may not have committed"
        } else {
            ""
        };
        Error::unavailable(format!("{action} under {}: {e}{doubt}", owner.describe()))
            .with_site("etcd", action.to_owned())
            .with_source(e)
    }

    fn timed_out(action: &str, owner: &Owner<'_>, in_doubt: bool) -> Error {
        let doubt = if in_doubt {
            "; the write may or may not have committed"
        } else {
            ""
        };
        Error::timeout(format!(
            "{action} under {}: no reply in time{doubt}",
            owner.describe()
        ))
        .with_site("etcd", action.to_owned())
    }

    pub(super) async fn put(
        etcd: &EtcdBackend,
        owner: Owner<'_>,
        key: &str,
        value: Vec<u8>,
    ) -> Result<()> {
        const ACTION: &str = "guarded_put";
        if !owner.is_held() {
            return Err(lost(&owner, key));
        }
        let txn = Txn::new()
            .when([lock_etcd::is_owner(owner.key(), revision(&owner))])
            .and_then([TxnOp::put(key, value, None)]);
        let mut kv = etcd.client().kv_client();
        let reply = tokio::time::timeout(etcd.config().request_timeout, kv.txn(txn)).await;
        match reply {
            Err(_) => Err(timed_out(ACTION, &owner, true)),
            Ok(Err(e)) => Err(failed(ACTION, &owner, e, true)),
            Ok(Ok(reply)) if reply.succeeded() => Ok(()),
            Ok(Ok(_)) => Err(lost(&owner, key)),
        }
    }

    pub(super) async fn delete(etcd: &EtcdBackend, owner: Owner<'_>, key: &str) -> Result<bool> {
        const ACTION: &str = "guarded_delete";
        if !owner.is_held() {
            return Err(lost(&owner, key));
        }
        let txn = Txn::new()
            .when([lock_etcd::is_owner(owner.key(), revision(&owner))])
            .and_then([TxnOp::delete(key, None)]);
        let mut kv = etcd.client().kv_client();
        let reply = tokio::time::timeout(etcd.config().request_timeout, kv.txn(txn)).await;
        match reply {
            Err(_) => Err(timed_out(ACTION, &owner, true)),
            Ok(Err(e)) => Err(failed(ACTION, &owner, e, true)),
            Ok(Ok(reply)) if reply.succeeded() => Ok(reply.op_responses().iter().any(|op| {
                matches!(op, etcd_client::TxnOpResponse::Delete(deleted) if deleted.deleted() > 0)
            })),
            Ok(Ok(_)) => Err(lost(&owner, key)),
        }
    }

    fn lost(owner: &Owner<'_>, key: &str) -> Error {
        Error::lease_lost(format!(
            "guarded write of {key}: {} is no longer held; nothing was written",
            owner.describe()
        ))
        .with_site("etcd", "guarded write")
    }

    pub(super) async fn is_owner(etcd: &EtcdBackend, owner: Owner<'_>) -> Result<bool> {
        const ACTION: &str = "is_owner";
        let mut client = etcd.client();
        let reply =
            tokio::time::timeout(etcd.config().request_timeout, client.get(owner.key(), None))
                .await;
        match reply {
            Err(_) => Err(timed_out(ACTION, &owner, false)),
            Ok(Err(e)) => Err(failed(ACTION, &owner, e, false)),
            Ok(Ok(reply)) => Ok(reply
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == revision(&owner))),
        }
    }
}

#[cfg(feature = "zk")]
mod zk_impl {
    use lock_core::{Error, ErrorKind, Result};
    use lock_zk::ZkBackend;

    use super::Owner;

    fn write<'g>(zk: &ZkBackend, owner: Owner<'g>) -> lock_zk::GuardedWrite<'g> {
        match owner {
            Owner::Lock(guard) => zk.guarded_write(guard),
            Owner::Leader(leadership) => zk.guarded_write_as_leader(leadership),
        }
    }

    /// Sets the node's data if it exists, else creates it; if another
    /// writer created or deleted it in between, tries the other way once.
    pub(super) async fn put(
        zk: &ZkBackend,
        owner: Owner<'_>,
        path: &str,
        value: Vec<u8>,
    ) -> Result<()> {
        let mut exists = stat(zk, &owner, path, "guarded_put").await?.is_some();
        for attempt in 0..2 {
            let guarded = if exists {
                write(zk, owner).set_data(path, value.clone(), None)
            } else {
                write(zk, owner).create(path, value.clone())
            };
            match guarded.commit().await {
                Ok(_) => return Ok(()),
                Err(e) if attempt == 0 && e.kind() == ErrorKind::Backend => exists = !exists,
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Deletes the node if it exists; either way only while the lock is
    /// held (a missing node commits the lock check alone). If another
    /// writer created or deleted it in between, tries the other way once.
    pub(super) async fn delete(zk: &ZkBackend, owner: Owner<'_>, path: &str) -> Result<bool> {
        let mut exists = stat(zk, &owner, path, "guarded_delete").await?.is_some();
        for attempt in 0..2 {
            let guarded = if exists {
                write(zk, owner).delete(path, None)
            } else {
                write(zk, owner)
            };
            match guarded.commit().await {
                Ok(_) => return Ok(exists),
                Err(e) if attempt == 0 && e.kind() == ErrorKind::Backend => exists = !exists,
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt returns")
    }

    pub(super) async fn is_owner(zk: &ZkBackend, owner: Owner<'_>) -> Result<bool> {
        let stat = stat(zk, &owner, owner.key(), "is_owner").await?;
        Ok(stat.is_some_and(|s| s.ephemeral_owner != 0))
    }

    async fn stat(
        zk: &ZkBackend,
        owner: &Owner<'_>,
        path: &str,
        action: &str,
    ) -> Result<Option<lock_zk::zk::Stat>> {
        let client = zk.client();
        let reply =
            tokio::time::timeout(zk.config().request_timeout, client.check_stat(path)).await;
        let context = || format!("{action} under {}: reading {path}", owner.describe());
        match reply {
            Err(_) => Err(Error::timeout(format!("{}: no reply in time", context()))
                .with_site("zk", action.to_owned())),
            Ok(Err(e)) => Err(Error::unavailable(format!("{}: {e}", context()))
                .with_site("zk", action.to_owned())
                .with_source(e)),
            Ok(Ok(stat)) => Ok(stat),
        }
    }
}
