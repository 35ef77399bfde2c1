//! Fenced transactions: the user's writes commit only while the lock is
//! still held, checked by the database itself.
//!
//! The transaction first takes a share lock on the key's row in `keys`
//! (`LOCK IN SHARE MODE`), then checks that the guard's entry is still
//! granted with its token and that its lease has not run out by the
//! server's clock. Everything that could let another holder in (a grant, a
//! removal of expired entries, a break) locks that row exclusively first,
//! so it waits until the fenced transaction ends: no other holder can be
//! granted the lock between the check and the commit. The holder's
//! renewals update only its entry, so they go on meanwhile.
//!
//! A fenced transaction that checked in time therefore holds off a
//! takeover until it ends. So that a paused holder cannot hold it off
//! forever, on MariaDB the session's `idle_transaction_timeout` is set to
//! the lease's TTL (whole seconds, at least one) first: the server closes
//! a session idle inside a transaction that long, which rolls it back.
//! MySQL has no such setting; there the bound is the client's own
//! timeouts, or the server's `wait_timeout`.
//!
//! The lease check compares with `UTC_TIMESTAMP(6)`: the user's session
//! keeps its own time zone, and the check is a statement of its own that
//! starts after the share lock is held.

use std::future::Future;
use std::pin::Pin;

use distlock_core::{Error, FencingToken, LockGuard, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, TxOpts};

use crate::backend::MysqlBackend;
use crate::errors::{from_mysql, server_code};

/// "Unknown system variable": MySQL has no `idle_transaction_timeout`.
const UNKNOWN_VARIABLE: u16 = 1193;

/// What a fenced transaction checks: the holder's key and token. Taken
/// from a guard, it stays valid after the guard is gone (and then fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    key: String,
    token: FencingToken,
    idle_bound_secs: u64,
}

impl Fence {
    /// The fence of `guard`'s grant.
    pub fn of(guard: &LockGuard) -> Self {
        Fence {
            key: guard.key().to_owned(),
            token: guard.token(),
            idle_bound_secs: guard.ttl().as_secs_f64().ceil().max(1.0) as u64,
        }
    }

    /// The token it checks.
    pub fn token(&self) -> FencingToken {
        self.token
    }
}

/// The user's work inside a fenced transaction.
pub type FencedWork<'t, T> =
    Pin<Box<dyn Future<Output = std::result::Result<T, mysql_async::Error>> + Send + 't>>;

impl MysqlBackend {
    /// Runs `work` in one transaction on `conn` (a connection to the same
    /// database as this backend), committed only if `fence`'s grant still
    /// holds the lock when the transaction checks it; it then holds it
    /// until the commit, since no takeover can pass the key's share lock.
    ///
    /// Fails with `LeaseLost`, after rolling back, when the grant is gone
    /// (released, broken, expired or taken over); with the driver's error,
    /// mapped as the backend's own, when `work` or the commit fails.
    ///
    /// ```no_run
    /// # async fn demo(backend: distlock_mysql::MysqlBackend, mut conn: mysql_async::Conn) -> distlock_core::Result<()> {
    /// use distlock_core::LockBackendExt;
    /// use distlock_mysql::Fence;
    /// use mysql_async::prelude::Queryable;
    ///
    /// let guard = backend.lock("ledger").await?;
    /// backend
    ///     .fenced_transaction(&mut conn, &Fence::of(&guard), |tx| {
    ///         Box::pin(async move { tx.query_drop("UPDATE ledger SET total = total + 1").await })
    ///     })
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: a cancelled call never commits; the driver
    /// rolls the transaction back when it is dropped.
    pub async fn fenced_transaction<T, F>(
        &self,
        conn: &mut Conn,
        fence: &Fence,
        work: F,
    ) -> Result<T>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> FencedWork<'t, T>,
    {
        self.table_only("fenced transactions")?;
        let context = format!(
            "run a transaction fenced by {} (token {})",
            fence.key, fence.token
        );
        let bound = format!(
            "SET SESSION idle_transaction_timeout = {}",
            fence.idle_bound_secs
        );
        match conn.query_drop(bound).await {
            Ok(()) => {}
            Err(e) if server_code(&e) == Some(UNKNOWN_VARIABLE) => {}
            Err(e) => return Err(from_mysql(e, &context)),
        }
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(|e| from_mysql(e, &context))?;
        self.check_fence(&mut tx, fence).await?;
        let value = work(&mut tx).await.map_err(|e| from_mysql(e, &context))?;
        tx.commit().await.map_err(|e| from_mysql(e, &context))?;
        Ok(value)
    }

    /// Checks `fence` inside `tx` and keeps the key's share lock until `tx`
    /// ends: for callers that manage their transaction themselves. Fails
    /// with `LeaseLost` when the grant is gone; roll back then.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled check leaves the transaction to its owner.
    pub async fn check_fence(&self, tx: &mut Transaction<'_>, fence: &Fence) -> Result<()> {
        let context = format!("check the fence of {}", fence.key);
        let sql = &self.inner.sql;
        let key = fence.key.as_bytes();
        let _: Option<u64> = tx
            .exec_first(&sql.fence_key, (key,))
            .await
            .map_err(|e| from_mysql(e, &context))?;
        let live: Option<u64> = tx
            .exec_first(&sql.fence_entry, (key, fence.token.get()))
            .await
            .map_err(|e| from_mysql(e, &context))?;
        if live.unwrap_or(0) == 0 {
            return Err(Error::lease_lost(format!(
                "{} (token {}) is no longer held: the fenced transaction was rolled back",
                fence.key, fence.token
            )));
        }
        Ok(())
    }
}
