//! The `advisory` layout: a lock is a session advisory lock
//! (`pg_advisory_lock`), shared with any other client that takes the same
//! key, such as `psql` or another application.
//!
//! A name that is a decimal `i64` is the key itself; any other name (with
//! the prefix before it) is hashed by the server's `hashtextextended(text,
//! 0)`, which any client can call too. Each held lock has a connection of
//! its own, since the lock belongs to the session: the session *is* the
//! lease. Tokens still come from the `tokens` sequence, taken in the same
//! statement as the lock, once it is granted (one round trip per
//! acquisition), so they rise across the holders that use this crate
//! (other clients take none).
//!
//! Giving up a wait never races a late grant: the waiting session is
//! cancelled and its connection closed, and a closed session holds nothing.
//! A session released cleanly is kept for the next acquisition
//! ([`crate::sessions`]).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{Grant, Lease, LossNotifier, SentAt};
use distlock_core::{AcquireOptions, Error, LockGuard, LockName, LostReason, Result, Wait};
use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::backend::PostgresBackend;
use crate::sessions::{Param, Session, Sessions};

/// The advisory lock key of `name` under `prefix`, as the SQL that computes
/// it on the server with its parameters: a decimal `i64` name is the key.
fn key_param(prefix: &str, name: &LockName) -> (Option<i64>, String) {
    (name.as_str().parse::<i64>().ok(), format!("{prefix}{name}"))
}

/// SQL for the key: `$1` the decimal key if any, `$2` the text to hash.
const KEY: &str = "coalesce($1::bigint, hashtextextended($2::text, 0))";

impl PostgresBackend {
    /// Takes the advisory lock of `name`.
    pub(crate) async fn acquire_advisory(
        &self,
        name: &LockName,
        options: &AcquireOptions,
    ) -> Result<LockGuard> {
        let config = &self.inner.config;
        let ttl = options.ttl_for(config.ttl, &distlock_core::LockBackend::capabilities(self))?;
        crate::config::check_ttl(ttl)?;
        let (decimal, text) = key_param(&config.prefix, name);
        let deadline = options.wait.deadline_from(Instant::now());
        let bound = config.request_timeout;
        let statement = match options.wait {
            Wait::No => format!(
                "WITH tried AS MATERIALIZED (SELECT pg_try_advisory_lock({KEY}) AS granted) \
                 SELECT granted, {KEY}, CASE WHEN granted THEN nextval('{}.tokens') END \
                 FROM tried",
                config.schema
            ),
            // `pg_advisory_lock` returns `void`: a row means granted.
            _ => format!(
                "WITH granted AS MATERIALIZED (SELECT pg_advisory_lock({KEY})) \
                 SELECT true, {KEY}, nextval('{}.tokens') FROM granted",
                config.schema
            ),
        };
        let params: [Param<'_>; 2] = [(&decimal, Type::INT8), (&text, Type::TEXT)];
        let mut fresh_only = false;
        let (session, rows) = loop {
            let session = if fresh_only {
                self.inner.sessions.open().await?
            } else {
                self.inner.sessions.take().await?
            };
            let request = session.query(&statement, &params);
            let answer = match (options.wait, deadline) {
                (Wait::Forever, _) | (_, None) => Ok(request.await),
                (Wait::No, _) => tokio::time::timeout(bound, request).await,
                (_, Some(deadline)) => tokio::time::timeout_at(deadline, request).await,
            };
            match answer {
                Ok(Ok(rows)) => break (session, rows),
                // A kept session that the server closed while it was idle
                // (a restart, an idle timeout) holds nothing: try once more
                // on a new connection.
                Ok(Err(e)) if e.is_closed() && session.reused => {
                    drop(session);
                    fresh_only = true;
                }
                Ok(Err(e)) => {
                    session.close().await;
                    return Err(crate::errors::from_pg(e, &format!("lock {name}")));
                }
                Err(_) => {
                    session.close().await;
                    return Err(match options.wait {
                        Wait::No => crate::errors::timed_out(&format!("lock {name}"), bound),
                        _ => Error::timeout(format!(
                            "advisory lock {name} is still held by someone else after the wait"
                        )),
                    });
                }
            }
        };
        // The session is the lease: it has no server-side expiry, so its
        // validity (checked by renewal) counts from the grant, not from a
        // wait that may have been long.
        let sent = SentAt::now();
        let granted: bool = rows.first().is_some_and(|row| row.get(0));
        let key: i64 = rows.first().map_or(0, |row| row.get(1));
        if !granted {
            // Not granted, nothing held: the session is clean.
            self.inner.sessions.put(session);
            return Err(Error::would_block(format!(
                "advisory lock {name} (key {key}) is held by someone else"
            )));
        }
        let token: i64 = rows
            .first()
            .and_then(|row| row.get::<_, Option<i64>>(2))
            .unwrap_or(0);
        let notifier = LossNotifier::new();
        let unsigned = u64::try_from(token)
            .map_err(|_| Error::backend(format!("{name}: negative token {token}")))?;
        let grant = Grant::new(name.clone(), unsigned, format!("advisory:{key}"), ttl, sent)
            .with_notifier(notifier.clone())
            .renewed_by(&self.inner.renewer);
        distlock_core::raw::leased_guard(
            grant,
            AdvisoryLease {
                session: Mutex::new(Some(Arc::new(session))),
                sessions: self.inner.sessions.clone(),
                key,
                name: name.clone(),
                bound,
                notifier,
            },
        )
    }
}

/// A held advisory lock: its session.
struct AdvisoryLease {
    /// Taken out by the release.
    session: Mutex<Option<Arc<Session>>>,
    sessions: Arc<Sessions>,
    key: i64,
    name: LockName,
    bound: Duration,
    notifier: LossNotifier,
}

impl fmt::Debug for AdvisoryLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvisoryLease")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish()
    }
}

impl AdvisoryLease {
    /// The session, while the lock has not been released.
    fn session(&self) -> Option<Arc<Session>> {
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn gone(&self, why: &str) -> Error {
        Error::lease_lost(format!(
            "advisory lock {} (key {}) is no longer held: {why}",
            self.name, self.key
        ))
    }
}

#[async_trait]
impl Lease for AdvisoryLease {
    /// Checks that the session still holds the lock: the session is the
    /// lease, so a closed connection means the lock is gone.
    async fn renew(&self) -> Result<()> {
        let check = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                     AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
                     AND ((classid::bigint << 32) | objid::bigint) = $1)";
        let key = self.key;
        let params: [Param<'_>; 1] = [(&key, Type::INT8)];
        let Some(session) = self.session() else {
            return Err(self.gone("it was released"));
        };
        let asked = session.query(check, &params);
        match tokio::time::timeout(self.bound, asked).await {
            Ok(Ok(rows)) if rows.first().is_some_and(|row| row.get::<_, bool>(0)) => Ok(()),
            Ok(Ok(_)) => {
                self.notifier.fire(LostReason::Revoked);
                Err(self.gone("the session no longer holds it"))
            }
            Ok(Err(e)) if e.is_closed() || e.code().is_some() => {
                // The session ended (terminated, or the server restarted).
                self.notifier.fire(LostReason::Revoked);
                Err(self.gone(&format!("its session ended ({e})")))
            }
            Ok(Err(e)) => Err(crate::errors::from_pg(e, "check an advisory lock")),
            Err(_) => Err(crate::errors::timed_out(
                "check an advisory lock",
                self.bound,
            )),
        }
    }

    /// Unlocks; a session whose unlock succeeded holds nothing, so it is
    /// kept for reuse.
    ///
    /// A session takes exactly one advisory lock, once: an acquisition
    /// uses a session alone, and any acquisition that fails, times out or
    /// is cancelled closes its session. So when `pg_advisory_unlock`
    /// returns true, the session's one lock count went to zero. (Asking
    /// `pg_locks` instead would take every lock-manager partition lock on
    /// the server, stalling every other hand-off while it reads them.)
    async fn release(&self) -> Result<()> {
        let unlock = "SELECT pg_advisory_unlock($1)";
        let key = self.key;
        let params: [Param<'_>; 1] = [(&key, Type::INT8)];
        // Dropped on every path but a clean one: a closed session frees
        // whatever it held, also when this future is cancelled.
        let Some(session) = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return Err(self.gone("it was released already"));
        };
        let asked = session.query(unlock, &params);
        match tokio::time::timeout(self.bound, asked).await {
            Ok(Ok(rows)) => {
                let unlocked = rows.first().is_some_and(|row| row.get::<_, bool>(0));
                if unlocked {
                    // A renewal still in flight keeps a clone: close then.
                    if let Ok(session) = Arc::try_unwrap(session) {
                        self.sessions.put(session);
                    }
                }
                if unlocked {
                    Ok(())
                } else {
                    Err(self.gone("the session did not hold it"))
                }
            }
            Ok(Err(e)) if e.is_closed() || e.code().is_some() => {
                Err(self.gone(&format!("its session ended ({e})")))
            }
            Ok(Err(e)) => Err(crate::errors::from_pg(e, "release an advisory lock")),
            // Unknown: the session is closed as it drops, which frees it anyway.
            Err(_) => Err(crate::errors::timed_out(
                "release an advisory lock",
                self.bound,
            )),
        }
    }

    fn release_blocking(&self) {
        // Closing the connection ends the session and frees the lock.
        drop(
            self.session
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }
}
