//! One look at a queue: a transaction that queues, grants or reports the
//! wait, under the key's row lock.
//!
//! The transaction locks the key's row in `keys` (creating it on first
//! use), removes the key's entries whose lease ran out by the server's
//! clock, reads what is left in arrival order, and applies distlock-core's
//! grant rule ([`distlock_core::raw::blockers`]) to the attempt's place in
//! it: a writer (a mutex, an election) when nothing is ahead, a reader
//! when no writer is ahead, a permit when fewer than its limit are ahead.
//! A grant takes `last_token + 1` from the key's row and writes it back in
//! the same transaction, so its token is durable exactly when the grant
//! is. Every look commits; one that found the entry already granted (a
//! retry after an answer was lost) restarts its lease and reports the
//! grant again.

use std::time::Duration;

use distlock_core::raw::SentAt;
use distlock_core::{Access, Result};
use mysql_async::TxOpts;
use mysql_async::prelude::Queryable;

use crate::backend::Inner;
use crate::keys;

/// One acquisition's fixed arguments.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) access: Access,
    pub(crate) ttl_us: u64,
    pub(crate) holder: String,
    pub(crate) value: Option<Vec<u8>>,
    /// Whether to queue when not granted (false for `Wait::No`).
    pub(crate) queue: bool,
}

/// What one look found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Granted with this token; the lease counts from when the statement
    /// that set its expiry was sent (after the key's lock was held, so a
    /// wait for that lock does not eat into the lease). The flag says
    /// whether other entries of the key came after ours (waiters behind).
    Granted(u64, SentAt, bool),
    /// Still blocked, standing there.
    Waiting(Place),
    /// A permit ahead has another limit.
    LimitDiffers(u32),
}

/// Where a blocked attempt stands in its queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    /// How long until the first grant ahead runs out.
    pub(crate) first_ends_in: Option<Duration>,
    /// Waiters (entries not granted) ahead of ours.
    pub(crate) waiters_ahead: usize,
    /// Only grants block it: no waiter goes first.
    pub(crate) next_in_line: bool,
}

/// One row of a queue, as a look reads it.
type QueueRow = (u64, String, String, Option<u32>, bool, Option<u64>, i64);

/// The options of every transaction the backend runs on its pool. Each
/// pooled session is at `READ COMMITTED` from its login on (see
/// [`crate::connect`]), so no transaction sets it again: that would cost
/// a round trip of its own each time.
pub(crate) fn tx_opts() -> TxOpts {
    TxOpts::default()
}

/// Looks at `attempt`'s queue once.
pub(crate) async fn look(inner: &Inner, attempt: &Attempt) -> Result<Outcome> {
    let sql = &inner.sql;
    let context = format!("acquire {}", attempt.key);
    inner
        .pool
        .run(&context, |mut conn| async move {
            let mut tx = conn.start_transaction(tx_opts()).await?;
            let key = attempt.key.as_bytes();
            // A used key's row is locked and read in one statement; a new
            // key's is created (and locked) first.
            let last_token = match tx.exec_first(&sql.lock_used_key, (key,)).await? {
                Some(last_token) => last_token,
                None => {
                    tx.exec_drop(&sql.lock_key, (key,)).await?;
                    tx.exec_first(&sql.last_token, (key,)).await?.unwrap_or(0)
                }
            };
            tx.exec_drop(&sql.delete_expired, (key,)).await?;
            let rows: Vec<QueueRow> = tx.exec(&sql.queue_of, (key,)).await?;
            let mine = rows.iter().position(|row| row.1 == attempt.owner);
            let ahead_rows = &rows[..mine.unwrap_or(rows.len())];
            if let Some(at) = mine {
                let (id, _, _, _, granted, token, _) = &rows[at];
                if let (true, Some(token)) = (*granted, token) {
                    // A retry after a lost answer: the lease restarts now,
                    // so that it never ends before the sender thinks it does.
                    let sent = SentAt::now();
                    tx.exec_drop(&sql.extend_entry, (attempt.ttl_us, id))
                        .await?;
                    tx.commit().await?;
                    return Ok(Outcome::Granted(*token, sent, rows.len() > at + 1));
                }
            }
            let ahead: Vec<Access> = ahead_rows
                .iter()
                .map(|row| keys::loaded_access(&row.2, row.3))
                .collect();
            if let Access::Permit(limit) = attempt.access
                && let Some(theirs) = ahead.iter().find_map(|a| match a {
                    Access::Permit(other) if *other != limit => Some(other.get()),
                    _ => None,
                })
            {
                tx.exec_drop(&sql.delete_owner, (&attempt.owner,)).await?;
                tx.commit().await?;
                return Ok(Outcome::LimitDiffers(theirs));
            }
            let blockers = distlock_core::raw::blockers(attempt.access, &ahead);
            let blocked = !blockers.is_empty();
            let next_in_line = blockers.iter().all(|&at| ahead_rows[at].4);
            let (kind, permits) = keys::stored_access(attempt.access);
            let holder = attempt.holder.as_bytes();
            if !blocked {
                let token = last_token + 1;
                tx.exec_drop(&sql.set_last_token, (token, key)).await?;
                let sent = SentAt::now();
                match mine {
                    Some(at) => {
                        tx.exec_drop(
                            &sql.grant_entry,
                            (token, holder, &attempt.value, attempt.ttl_us, rows[at].0),
                        )
                        .await?;
                    }
                    None => {
                        tx.exec_drop(
                            &sql.insert_entry,
                            (
                                key,
                                &attempt.owner,
                                kind,
                                permits,
                                true,
                                token,
                                holder,
                                &attempt.value,
                                true,
                                attempt.ttl_us,
                            ),
                        )
                        .await?;
                    }
                }
                tx.commit().await?;
                let behind = mine.is_some_and(|at| rows.len() > at + 1);
                return Ok(Outcome::Granted(token, sent, behind));
            }
            if attempt.queue {
                match mine {
                    Some(at) => {
                        tx.exec_drop(&sql.extend_entry, (attempt.ttl_us, rows[at].0))
                            .await?;
                    }
                    None => {
                        tx.exec_drop(
                            &sql.insert_entry,
                            (
                                key,
                                &attempt.owner,
                                kind,
                                permits,
                                false,
                                None::<u64>,
                                holder,
                                None::<Vec<u8>>,
                                false,
                                attempt.ttl_us,
                            ),
                        )
                        .await?;
                    }
                }
            }
            tx.commit().await?;
            // How long until the first grant ahead runs out: the longest a
            // waiter needs to sleep before that grant could be taken over.
            let first_ends_in = ahead_rows
                .iter()
                .filter(|row| row.4)
                .map(|row| row.6)
                .min()
                .map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
            Ok(Outcome::Waiting(Place {
                first_ends_in,
                waiters_ahead: ahead_rows.iter().filter(|row| !row.4).count(),
                next_in_line,
            }))
        })
        .await
}
