//! Guarded writes: commit a Txn only while a lock is still held.
//!
//! A lease can run out between "I hold the lock" and "my write reached
//! etcd". Put the ownership compare in the same Txn as the write, and etcd
//! itself refuses the write once the holder's key is gone or belongs to a
//! newer acquisition (etcd's `Mutex.IsOwner`).

use etcd_client::{Compare, CompareOp};
use lock_core::LockGuard;

/// The compare `CreateRevision(key) == create_revision`: true exactly while
/// the acquisition with that key and fencing token still holds the lock.
///
/// ```
/// use lock_etcd::etcd_client::{Txn, TxnOp};
/// let txn = Txn::new()
///     .when([lock_etcd::is_owner("/distlock/lock/jobs/694d8a3b22c10f07", 42)])
///     .and_then([TxnOp::put("/data/report", "done", None)]);
/// # let _ = txn;
/// ```
pub fn is_owner(key: impl Into<Vec<u8>>, create_revision: i64) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, create_revision)
}

/// [`is_owner`] for a guard from this backend: its key and its token (the
/// key's create revision). Works for a [`Leadership`](lock_core::Leadership)
/// too, through `is_owner(leadership.key(), leadership.token().get() as i64)`.
pub fn is_owner_of(guard: &LockGuard) -> Compare {
    is_owner(
        guard.key(),
        i64::try_from(guard.token().get()).unwrap_or(i64::MAX),
    )
}
