//! Guarded writes: commit a Txn only while a lock is still held.
//!
//! A lease can run out between "I hold the lock" and "my write reached
//! etcd". Put the ownership compare in the same Txn as the write, and etcd
//! itself refuses the write once the holder's key is gone or belongs to a
//! newer acquisition (etcd's `Mutex.IsOwner`).

use distlock_core::{Error, LockGuard, Result};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};

/// The compare `CreateRevision(key) == create_revision`: true exactly while
/// the acquisition with that key and fencing token still holds the lock.
///
/// ```
/// use distlock_etcd::etcd_client::{Txn, TxnOp};
/// let txn = Txn::new()
///     .when([distlock_etcd::is_owner("/distlock/lock/jobs/694d8a3b22c10f07", 42)])
///     .and_then([TxnOp::put("/data/report", "done", None)]);
/// # let _ = txn;
/// ```
pub fn is_owner(key: impl Into<Vec<u8>>, create_revision: i64) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, create_revision)
}

/// [`is_owner`] for a guard from this backend: its key and its token (the
/// key's create revision). Works for a [`Leadership`](distlock_core::Leadership)
/// too, through `is_owner(leadership.key(), leadership.token().get() as i64)`.
pub fn is_owner_of(guard: &LockGuard) -> Compare {
    is_owner(
        guard.key(),
        i64::try_from(guard.token().get()).unwrap_or(i64::MAX),
    )
}

/// The guarded writes every backend with them offers under the same names
/// (`guarded_put`, `guarded_delete`, `is_owner`): a Txn whose compare is
/// [`is_owner_of`] the guard.
impl crate::EtcdBackend {
    /// Puts `value` at `key` only while `guard` (of a lock or a leadership
    /// from this backend) still holds it: a Txn compares the lock key's
    /// create revision with the guard's token, atomically with the put.
    ///
    /// Fails with `LeaseLost`, writing nothing, once the lock is gone or
    /// belongs to a newer acquisition; with `Unavailable` or `Timeout` when
    /// the reply was lost (the write may or may not have committed).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled put may or may not have been committed
    /// (atomically, and only while the lock was held).
    pub async fn guarded_put(
        &self,
        guard: &LockGuard,
        key: &str,
        value: impl Into<Vec<u8>>,
    ) -> Result<()> {
        self.guarded(guard, "guarded_put", key, TxnOp::put(key, value, None))
            .await
            .map(drop)
    }

    /// Deletes `key` only while `guard` holds its lock, as
    /// [`guarded_put`](Self::guarded_put); whether the key existed.
    ///
    /// # Cancel safety
    ///
    /// As [`guarded_put`](Self::guarded_put).
    pub async fn guarded_delete(&self, guard: &LockGuard, key: &str) -> Result<bool> {
        let reply = self
            .guarded(guard, "guarded_delete", key, TxnOp::delete(key, None))
            .await?;
        Ok(reply.op_responses().iter().any(
            |op| matches!(op, etcd_client::TxnOpResponse::Delete(deleted) if deleted.deleted() > 0),
        ))
    }

    /// Asks etcd whether `guard` still holds its lock: its key exists with
    /// its create revision. A `true` may be stale by the time it is read;
    /// to act on it, use [`guarded_put`](Self::guarded_put).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_owner(&self, guard: &LockGuard) -> Result<bool> {
        const ACTION: &str = "is_owner";
        let mut client = self.client();
        let reply =
            tokio::time::timeout(self.config().request_timeout, client.get(guard.key(), None))
                .await;
        match reply {
            Err(_) => Err(timed_out(ACTION, guard, false)),
            Ok(Err(e)) => Err(failed(ACTION, guard, e, false)),
            Ok(Ok(reply)) => Ok(reply
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == revision(guard))),
        }
    }

    /// Commits `op` only while `guard` holds its lock.
    async fn guarded(
        &self,
        guard: &LockGuard,
        action: &str,
        key: &str,
        op: TxnOp,
    ) -> Result<etcd_client::TxnResponse> {
        if !guard.is_held() {
            return Err(lost(action, guard, key));
        }
        let txn = Txn::new().when([is_owner_of(guard)]).and_then([op]);
        let mut kv = self.client().kv_client();
        let reply = tokio::time::timeout(self.config().request_timeout, kv.txn(txn)).await;
        match reply {
            Err(_) => Err(timed_out(action, guard, true)),
            Ok(Err(e)) => Err(failed(action, guard, e, true)),
            Ok(Ok(reply)) if reply.succeeded() => Ok(reply),
            Ok(Ok(_)) => Err(lost(action, guard, key)),
        }
    }
}

distlock_core::guarded_writes_by_inherent_methods!(crate::EtcdBackend);

fn revision(guard: &LockGuard) -> i64 {
    i64::try_from(guard.token().get()).unwrap_or(i64::MAX)
}

fn describe(guard: &LockGuard) -> String {
    format!("lock {} (token {})", guard.name(), guard.token())
}

fn in_doubt(in_doubt: bool) -> &'static str {
    if in_doubt {
        "; the write may or may not have committed"
    } else {
        ""
    }
}

fn failed(action: &str, guard: &LockGuard, e: etcd_client::Error, doubt: bool) -> Error {
    Error::unavailable(format!(
        "{action} under {}: {e}{}",
        describe(guard),
        in_doubt(doubt)
    ))
    .with_site("etcd", action.to_owned())
    .with_source(e)
}

fn timed_out(action: &str, guard: &LockGuard, doubt: bool) -> Error {
    Error::timeout(format!(
        "{action} under {}: no reply in time{}",
        describe(guard),
        in_doubt(doubt)
    ))
    .with_site("etcd", action.to_owned())
}

fn lost(action: &str, guard: &LockGuard, key: &str) -> Error {
    Error::lease_lost(format!(
        "{action} of {key}: {} is no longer held; nothing was written",
        describe(guard)
    ))
    .with_site("etcd", action.to_owned())
}
