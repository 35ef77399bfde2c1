//! A granted entry's round trips: renew, release, proclaim, each checked
//! against the entry's owner id so that nobody else's grant is touched.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::raw::{Lease, LossNotifier};
use distlock_core::{Error, LostReason, Result};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::backend::Inner;
use crate::pool::Lane;

/// One granted entry.
pub(crate) struct PgLease {
    pub(crate) inner: Arc<Inner>,
    pub(crate) owner: Uuid,
    pub(crate) key: String,
    pub(crate) token: i64,
    pub(crate) ttl_ms: i64,
    pub(crate) notifier: LossNotifier,
}

impl fmt::Debug for PgLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLease")
            .field("key", &self.key)
            .field("token", &self.token)
            .finish()
    }
}

#[async_trait]
impl Lease for PgLease {
    /// Extends the lease by its TTL from the server's `clock_timestamp()`,
    /// only while it has not run out: an expired lease is never revived.
    async fn renew(&self) -> Result<()> {
        let owner = self.owner.to_string();
        let context = format!("renew {} (token {})", self.key, self.token);
        let sql = &self.inner.sql.renew;
        let ttl_ms = self.ttl_ms;
        let row = self
            .inner
            .pool
            .run_in(Lane::Renewals, &context, |client| async move {
                client
                    .query_typed(sql, &[(&owner, Type::TEXT), (&ttl_ms, Type::INT8)])
                    .await
            })
            .await?;
        let (renewed, present): (bool, bool) = row
            .first()
            .map_or((false, false), |row| (row.get(0), row.get(1)));
        if renewed {
            return Ok(());
        }
        if !present {
            // Deleted while ours: broken by an operator (or taken over).
            self.notifier.fire(LostReason::Revoked);
        }
        Err(Error::lease_lost(format!(
            "{} (token {}) is no longer held: its lease {}",
            self.key,
            self.token,
            if present { "ran out" } else { "was removed" }
        )))
    }

    async fn release(&self) -> Result<()> {
        let live = release(&self.inner, self.owner).await?;
        if live {
            Ok(())
        } else {
            Err(Error::lease_lost(format!(
                "{} (token {}) was no longer held when released",
                self.key, self.token
            )))
        }
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let owner = self.owner.to_string();
        let context = format!("proclaim a value for {}", self.key);
        let sql = &self.inner.sql.proclaim;
        let rows = self
            .inner
            .pool
            .run(&context, |client| async move {
                client
                    .query_typed(sql, &[(&owner, Type::TEXT), (&value, Type::BYTEA)])
                    .await
            })
            .await?;
        if rows.first().is_some_and(|row| row.get::<_, bool>(0)) {
            Ok(())
        } else {
            Err(Error::lease_lost(format!(
                "{} (token {}) is no longer led by this client",
                self.key, self.token
            )))
        }
    }
}

/// Deletes `owner`'s entry (held or waiting) and wakes the key's waiters.
/// Returns whether it was a grant whose lease had not run out.
pub(crate) async fn release(inner: &Inner, owner: Uuid) -> Result<bool> {
    let owner = owner.to_string();
    let sql = &inner.sql.release;
    let rows = inner
        .pool
        .run("release a lock entry", |client| async move {
            client.query_typed(sql, &[(&owner, Type::TEXT)]).await
        })
        .await?;
    Ok(rows.first().is_some_and(|row| row.get::<_, bool>(0)))
}
