//! Fenced transactions: the user's writes commit only while the lock is
//! still held, checked by the database itself.
//!
//! The transaction first locks the holder's entry row `FOR KEY SHARE`,
//! checking the guard's token and that the lease has not run out by the
//! server's `clock_timestamp()`. A release, a break or a takeover all
//! delete that row, so they wait until the transaction ends: no other
//! holder can be granted the lock between the check and the commit.
//! `FOR KEY SHARE` (rather than `FOR SHARE`) lets the holder's renewals,
//! which only move the row's expiry, go on meanwhile.
//!
//! A takeover of an expired grant never removes a row that a transaction
//! holds, so the lock cannot move while the fenced transaction is open,
//! even past the lease. So that a paused holder cannot keep it forever,
//! the check also sets `idle_in_transaction_session_timeout` to the
//! lease's TTL for the rest of the transaction: the server ends a fenced
//! transaction that sits idle that long, rolling it back.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use distlock_core::{Error, FencingToken, LockGuard, Result};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

use crate::backend::PostgresBackend;
use crate::errors::from_pg;

/// What a fenced transaction checks: the holder's key and token. Taken
/// from a guard, it stays valid after the guard is gone (and then fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    key: String,
    token: FencingToken,
    ttl: Duration,
}

impl Fence {
    /// The fence of `guard`'s grant.
    pub fn of(guard: &LockGuard) -> Self {
        Fence {
            key: guard.key().to_owned(),
            token: guard.token(),
            ttl: guard.ttl(),
        }
    }

    /// The token it checks.
    pub fn token(&self) -> FencingToken {
        self.token
    }
}

/// The user's work inside a fenced transaction.
pub type FencedWork<'t, T> =
    Pin<Box<dyn Future<Output = std::result::Result<T, tokio_postgres::Error>> + Send + 't>>;

impl PostgresBackend {
    /// Runs `work` in one transaction on `client` (a connection to the same
    /// database as this backend), committed only if `fence`'s grant still
    /// holds the lock at the start of the transaction; it then holds it
    /// until the commit, since nobody can delete the row in between. The
    /// server ends the transaction, rolling it back, if it sits idle
    /// between two statements for longer than the lock's TTL (its holder
    /// may be paused, and the lock cannot move while it is open).
    ///
    /// Fails with `LeaseLost`, after rolling back, when the grant is gone
    /// (released, broken, expired or taken over); with the driver's error,
    /// mapped as the backend's own, when `work` or the commit fails.
    ///
    /// ```no_run
    /// # async fn demo(backend: distlock_postgres::PostgresBackend, mut client: tokio_postgres::Client) -> distlock_core::Result<()> {
    /// use distlock_core::LockBackendExt;
    /// use distlock_postgres::Fence;
    ///
    /// let guard = backend.lock("ledger").await?;
    /// backend
    ///     .fenced_transaction(&mut client, &Fence::of(&guard), |tx| {
    ///         Box::pin(async move {
    ///             tx.execute("UPDATE ledger SET total = total + 1", &[]).await
    ///         })
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
        client: &mut Client,
        fence: &Fence,
        work: F,
    ) -> Result<T>
    where
        F: for<'t> FnOnce(&'t Transaction<'t>) -> FencedWork<'t, T>,
    {
        let context = format!(
            "run a transaction fenced by {} (token {})",
            fence.key, fence.token
        );
        let tx = client
            .transaction()
            .await
            .map_err(|e| from_pg(e, &context))?;
        self.check_fence(&tx, fence).await?;
        let value = work(&tx).await.map_err(|e| from_pg(e, &context))?;
        tx.commit().await.map_err(|e| from_pg(e, &context))?;
        Ok(value)
    }

    /// Checks `fence` inside `tx` and keeps its row locked until `tx`
    /// ends: for callers that manage their transaction themselves. Fails
    /// with `LeaseLost` when the grant is gone; roll back then. Sets
    /// `idle_in_transaction_session_timeout` to the lock's TTL for the
    /// rest of `tx`, as [`fenced_transaction`](Self::fenced_transaction)
    /// says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled check leaves the transaction to its owner.
    pub async fn check_fence(&self, tx: &Transaction<'_>, fence: &Fence) -> Result<()> {
        let token = i64::try_from(fence.token.get())
            .map_err(|_| Error::invalid_config(format!("token {} is out of range", fence.token)))?;
        let idle_limit = fence.ttl.as_millis().max(1).to_string();
        let rows = tx
            .query_typed(
                &self.inner.sql.fence,
                &[
                    (&fence.key, Type::TEXT),
                    (&token, Type::INT8),
                    (&idle_limit, Type::TEXT),
                ],
            )
            .await
            .map_err(|e| from_pg(e, &format!("check the fence of {}", fence.key)))?;
        if rows.is_empty() {
            return Err(Error::lease_lost(format!(
                "{} (token {}) is no longer held: the fenced transaction was rolled back",
                fence.key, fence.token
            )));
        }
        Ok(())
    }
}
