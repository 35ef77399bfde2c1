//! Writes that a backend's own server commits only while a lock is held.

use async_trait::async_trait;

use crate::{LockGuard, Result};

/// Writes to the lock service's own storage that its server commits only
/// while a lock (or a leadership) is still held, checked in the same
/// atomic step as the write: a transaction, a multi-operation or a script,
/// never a read followed by a write. A holder whose lease ran out, or
/// whose lock was broken or taken over, writes nothing.
///
/// Backends that can check ownership on their server implement it (etcd,
/// ZooKeeper, Redis on one server or a cluster); the facade `distlock`
/// offers it for any backend that does. Where no single server can check
/// the lock (Redlock, file, memory), pass the fencing token to the storage
/// written to instead.
#[async_trait]
pub trait GuardedWrites: Send + Sync + 'static {
    /// Writes `value` at `key` only while `guard`, a guard of this backend,
    /// still holds its lock.
    ///
    /// Fails with `LeaseLost`, writing nothing, once the lock is gone or
    /// belongs to a newer acquisition; with `Timeout` or `Unavailable` when
    /// the reply was lost (the write may or may not have committed).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled put may or may not have been committed
    /// (atomically, and only while the lock was held).
    async fn guarded_put(&self, guard: &LockGuard, key: &str, value: Vec<u8>) -> Result<()>;

    /// Deletes `key` only while `guard` still holds its lock, as
    /// [`guarded_put`](Self::guarded_put); returns whether the key existed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled delete may or may not have been
    /// committed (atomically, and only while the lock was held).
    async fn guarded_delete(&self, guard: &LockGuard, key: &str) -> Result<bool>;

    /// Asks the server whether `guard` still holds its lock. A `true` may
    /// be stale by the time it is read; to act on it, write with
    /// [`guarded_put`](Self::guarded_put).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn is_owner(&self, guard: &LockGuard) -> Result<bool>;
}

/// Implements [`GuardedWrites`] for a backend type by its inherent
/// methods of the same names (`guarded_put` taking any `Vec<u8>`,
/// `guarded_delete`, `is_owner`), which keep their own documentation. The
/// crate using it depends on `async-trait`.
#[macro_export]
macro_rules! guarded_writes_by_inherent_methods {
    ($backend:ty) => {
        #[::async_trait::async_trait]
        impl $crate::GuardedWrites for $backend {
            async fn guarded_put(
                &self,
                guard: &$crate::LockGuard,
                key: &str,
                value: Vec<u8>,
            ) -> $crate::Result<()> {
                <$backend>::guarded_put(self, guard, key, value).await
            }

            async fn guarded_delete(
                &self,
                guard: &$crate::LockGuard,
                key: &str,
            ) -> $crate::Result<bool> {
                <$backend>::guarded_delete(self, guard, key).await
            }

            async fn is_owner(&self, guard: &$crate::LockGuard) -> $crate::Result<bool> {
                <$backend>::is_owner(self, guard).await
            }
        }
    };
}
