//! A granted entry's round trips: renew, release, proclaim, each checked
//! against the entry's owner id so that nobody else's grant is touched.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::raw::{Lease, LossNotifier};
use distlock_core::{Error, LostReason, Result};
use mysql_async::prelude::Queryable;

use crate::backend::Inner;
use crate::wake::HolderWake;

/// One granted entry.
pub(crate) struct MysqlLease {
    pub(crate) inner: Arc<Inner>,
    pub(crate) owner: String,
    pub(crate) key: String,
    pub(crate) token: u64,
    pub(crate) ttl_us: u64,
    pub(crate) notifier: LossNotifier,
    /// The key's wake signal (mutexes): taken after the first renewal if
    /// the grant did not bring it, let go after the entry is deleted, so
    /// that the waiter it wakes finds the key free.
    pub(crate) wake: Arc<HolderWake>,
}

impl fmt::Debug for MysqlLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlLease")
            .field("key", &self.key)
            .field("token", &self.token)
            .finish()
    }
}

#[async_trait]
impl Lease for MysqlLease {
    /// Extends the lease by its TTL from the server's `SYSDATE(6)`, only
    /// while it has not run out: an expired lease is never revived. One
    /// statement; a second only when it renewed nothing, to tell a removed
    /// entry (revoked) from an expired one.
    async fn renew(&self) -> Result<()> {
        let context = format!("renew {} (token {})", self.key, self.token);
        let sql = &self.inner.sql;
        let (renewed, present) = self
            .inner
            .pool
            .run(&context, |mut conn| async move {
                conn.exec_drop(&sql.renew, (self.ttl_us, &self.owner))
                    .await?;
                if conn.affected_rows() > 0 {
                    return Ok((true, true));
                }
                let present: Option<u64> =
                    conn.exec_first(&sql.owner_exists, (&self.owner,)).await?;
                Ok((false, present.unwrap_or(0) > 0))
            })
            .await?;
        if renewed {
            let bound = self.inner.config.request_timeout;
            self.wake.keep_in_background(&self.inner.sessions, bound);
            return Ok(());
        }
        // A holder no more: its waiters need no signal from it (freed by
        // ending its session, so the lost answer is not held up).
        self.wake.abandon();
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
        let released = release(&self.inner, &self.owner).await;
        let bound = self.inner.config.request_timeout;
        self.wake.release(&self.inner.sessions, bound).await;
        if released? {
            Ok(())
        } else {
            Err(Error::lease_lost(format!(
                "{} (token {}) was no longer held when released",
                self.key, self.token
            )))
        }
    }

    fn release_blocking(&self) {
        self.wake.abandon();
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let context = format!("proclaim a value for {}", self.key);
        let sql = &self.inner.sql;
        let matched = self
            .inner
            .pool
            .run(&context, |mut conn| async move {
                conn.exec_drop(&sql.proclaim, (value, &self.owner)).await?;
                Ok(conn.affected_rows())
            })
            .await?;
        if matched > 0 {
            Ok(())
        } else {
            Err(Error::lease_lost(format!(
                "{} (token {}) is no longer led by this client",
                self.key, self.token
            )))
        }
    }
}

/// Deletes `owner`'s entry (held or waiting). Returns whether it was a
/// grant whose lease had not run out.
///
/// A release needs no lock on the key's row: it deletes only its own
/// entry, and waiters find out on their next look. Its row locks can meet
/// those of a look removing expired entries of the same key in the other
/// order; InnoDB then rolls one back as a deadlock victim (`1213`). A
/// delete of our own row is safe to send again, so the release tries again
/// (a few times, within the request timeout).
pub(crate) async fn release(inner: &Inner, owner: &str) -> Result<bool> {
    let sql = &inner.sql;
    inner
        .pool
        .run("release a lock entry", |mut conn| async move {
            let mut attempt = 0;
            loop {
                attempt += 1;
                match release_once(&mut conn, sql, owner).await {
                    Err(e) if attempt < RELEASE_ATTEMPTS && is_contention(&e) => {
                        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    }
                    outcome => return outcome,
                }
            }
        })
        .await
}

/// How many times a release is sent when it is a deadlock victim.
const RELEASE_ATTEMPTS: u32 = 5;

/// Whether InnoDB rolled the statement back for a deadlock or a lock wait.
fn is_contention(error: &mysql_async::Error) -> bool {
    matches!(
        crate::errors::server_code(error),
        Some(crate::errors::code::DEADLOCK | crate::errors::code::LOCK_WAIT_TIMEOUT)
    )
}

async fn release_once(
    conn: &mut mysql_async::Conn,
    sql: &crate::sql::Sql,
    owner: &str,
) -> std::result::Result<bool, mysql_async::Error> {
    conn.exec_drop(&sql.release_live, (owner,)).await?;
    if conn.affected_rows() > 0 {
        return Ok(true);
    }
    // Expired, or a queue entry: remove it all the same.
    conn.exec_drop(&sql.delete_owner, (owner,)).await?;
    Ok(false)
}
