//! The `named` layout: a lock is one of the server's named locks
//! (`GET_LOCK`), shared with any other client that takes the same name,
//! such as the `mariadb` command-line client or another application.
//!
//! The lock's name is the configured prefix and the lock name, used as is
//! when it is at most 64 characters long (the servers' limit); a longer
//! one is replaced by `distlock:` and the first 55 hex digits of the
//! SHA-256 of its UTF-8 bytes (64 characters in all), which any client can
//! compute too. On MariaDB the server compares names without regard to
//! case, so `Jobs` and `jobs` are one lock there.
//!
//! Each held lock has a session of its own, since the lock belongs to the
//! session: the session *is* the lease. The guard checks every TTL/3 that
//! its session still holds the lock (`IS_USED_LOCK(name) =
//! CONNECTION_ID()`, one round trip), and reports the lock lost when it
//! does not or the session is gone, so a session that died is noticed
//! within TTL/3 plus a request timeout, and the guard's validity (one TTL
//! from the last check that succeeded) runs out even if no check answers.
//!
//! Tokens are best effort: the server's clock in microseconds, read in
//! the statement that took the lock (after `GET_LOCK` answered), raised to
//! one more than the last token this backend handed out. They increase
//! across holders unless the server's clock steps back.
//!
//! Giving up a wait never races a late grant: the waiting session is
//! killed (`KILL CONNECTION`, see [`crate::sessions`]), and a killed
//! session holds nothing.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{Grant, Lease, LossNotifier, SentAt};
use distlock_core::{AcquireOptions, Error, LockGuard, LockName, LostReason, Result, Wait};
use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::backend::MysqlBackend;
use crate::errors::{from_mysql, timed_out};
use crate::sessions::{Session, Sessions};

/// The servers' longest lock name, in characters.
pub const MAX_NAMED_LEN: usize = 64;
/// What a hashed name starts with.
const HASHED: &str = "distlock:";
/// A wait "forever": `GET_LOCK` takes no infinite timeout on MariaDB.
const FOREVER_SECS: u64 = 365 * 24 * 3600;

/// The server-side name of `name` under `prefix` (see the module docs).
pub fn named_lock_name(prefix: &str, name: &LockName) -> String {
    let full = format!("{prefix}{name}");
    if full.chars().count() <= MAX_NAMED_LEN {
        return full;
    }
    let digest = hex::encode(Sha256::digest(full.as_bytes()));
    format!("{HASHED}{}", &digest[..MAX_NAMED_LEN - HASHED.len()])
}

/// The last token each backend handed out, so its tokens never go back.
#[derive(Debug, Default)]
pub(crate) struct LastToken(AtomicU64);

impl LastToken {
    fn next_after(&self, server_us: u64) -> u64 {
        let mut last = self.0.load(Ordering::Relaxed);
        loop {
            let token = server_us.max(last + 1);
            match self
                .0
                .compare_exchange(last, token, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return token,
                Err(seen) => last = seen,
            }
        }
    }
}

/// The lock statement's answer: granted (1), timed out (0) or failed
/// (NULL); the server clock in microseconds.
type LockAnswer = (Option<i64>, Option<u64>);

impl MysqlBackend {
    /// Takes the named lock of `name`.
    pub(crate) async fn acquire_named(
        &self,
        name: &LockName,
        options: &AcquireOptions,
    ) -> Result<LockGuard> {
        let config = &self.inner.config;
        let ttl = options.ttl_for(config.ttl, &distlock_core::LockBackend::capabilities(self))?;
        crate::config::check_ttl(ttl)?;
        let lock = named_lock_name(&config.prefix, name);
        let deadline = options.wait.deadline_from(Instant::now());
        let bound = config.request_timeout;
        let wait_secs = match options.wait {
            Wait::No => 0,
            Wait::Timeout(wait) => wait.as_secs_f64().ceil() as u64,
            _ => FOREVER_SECS,
        };
        let statement = "SELECT GET_LOCK(?, ?), \
                         CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED)";
        let context = format!("lock {name}");
        let mut fresh_only = false;
        let (mut session, answer) = loop {
            let mut session = if fresh_only {
                self.inner.sessions.open().await?
            } else {
                self.inner.sessions.take().await?
            };
            let reused = session.reused;
            let request = session
                .conn()
                .exec_first::<LockAnswer, _, _>(statement, (&lock, wait_secs));
            let answer = match (options.wait, deadline) {
                (Wait::Forever, _) | (_, None) => Ok(request.await),
                (Wait::No, _) => tokio::time::timeout(bound, request).await,
                (_, Some(deadline)) => tokio::time::timeout_at(deadline, request).await,
            };
            match answer {
                Ok(Ok(answer)) => {
                    session.settled();
                    break (session, answer.unwrap_or((None, None)));
                }
                // A kept session that the server closed while it was idle
                // (a restart, wait_timeout) holds nothing: try once more on
                // a new connection.
                Ok(Err(e)) if reused && is_gone(&e) => {
                    session.settled();
                    fresh_only = true;
                }
                Ok(Err(e)) => return Err(from_mysql(e, &context)),
                // Dropping the session kills it, and a killed session holds
                // nothing, even if the grant came just now.
                Err(_) => {
                    return Err(match options.wait {
                        Wait::No => timed_out(&context, bound),
                        _ => Error::timeout(format!(
                            "named lock {lock} is still held by someone else after the wait"
                        )),
                    });
                }
            }
        };
        // The session is the lease: it has no server-side expiry, so its
        // validity (checked by renewal) counts from the grant.
        let sent = SentAt::now();
        match answer {
            (Some(1), Some(server_us)) => {
                let token = self.inner.named_tokens.next_after(server_us);
                let notifier = LossNotifier::new();
                let grant = Grant::new(name.clone(), token, format!("named:{lock}"), ttl, sent)
                    .with_notifier(notifier.clone())
                    .renewed_by(&self.inner.renewer);
                distlock_core::raw::leased_guard(
                    grant,
                    NamedLease {
                        session: Mutex::new(Some(session)),
                        sessions: self.inner.sessions.clone(),
                        lock,
                        bound,
                        notifier,
                    },
                )
            }
            (Some(0), _) => {
                // Not granted, nothing held: the session is clean.
                self.inner.sessions.put(session);
                Err(match options.wait {
                    Wait::No => {
                        Error::would_block(format!("named lock {lock} is held by someone else"))
                    }
                    _ => Error::timeout(format!(
                        "named lock {lock} is still held by someone else after the wait"
                    )),
                })
            }
            _ => {
                // NULL: the wait was killed, or the server failed it.
                session.conn();
                Err(Error::unavailable(format!(
                    "could not lock {name}: GET_LOCK({lock}) returned NULL (killed or failed)"
                )))
            }
        }
    }
}

/// Whether `error` says the session is gone (closed, killed, broken).
fn is_gone(error: &mysql_async::Error) -> bool {
    matches!(
        error,
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_)
    ) || matches!(
        crate::errors::server_code(error),
        Some(crate::errors::code::CONNECTION_KILLED | crate::errors::code::SERVER_SHUTDOWN)
    ) || matches!(error, mysql_async::Error::Server(s) if s.state.starts_with("08") || s.code == 2006 || s.code == 2013)
}

/// A held named lock: its session.
struct NamedLease {
    /// Taken out by the release.
    session: Mutex<Option<Session>>,
    sessions: Arc<Sessions>,
    lock: String,
    bound: Duration,
    notifier: LossNotifier,
}

impl fmt::Debug for NamedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamedLease")
            .field("lock", &self.lock)
            .finish()
    }
}

impl NamedLease {
    fn gone(&self, why: &str) -> Error {
        Error::lease_lost(format!("named lock {} is no longer held: {why}", self.lock))
    }
}

#[async_trait]
impl Lease for NamedLease {
    /// Checks that the session still holds the lock: the session is the
    /// lease, so a session that ended means the lock is gone.
    async fn renew(&self) -> Result<()> {
        let check = "SELECT IS_USED_LOCK(?) = CONNECTION_ID()";
        let mut guard = self.session.lock().await;
        let Some(session) = guard.as_mut() else {
            return Err(self.gone("it was released"));
        };
        let asked = session
            .conn()
            .exec_first::<Option<i64>, _, _>(check, (&self.lock,));
        match tokio::time::timeout(self.bound, asked).await {
            Ok(Ok(answer)) => {
                session.settled();
                if answer.flatten() == Some(1) {
                    Ok(())
                } else {
                    self.notifier.fire(LostReason::Revoked);
                    Err(self.gone("the session no longer holds it"))
                }
            }
            Ok(Err(e)) if is_gone(&e) => {
                // The session ended (killed, or the server restarted).
                *guard = None;
                self.notifier.fire(LostReason::Revoked);
                Err(self.gone(&format!("its session ended ({e})")))
            }
            Ok(Err(e)) => Err(from_mysql(e, "check a named lock")),
            Err(_) => Err(timed_out("check a named lock", self.bound)),
        }
    }

    /// Releases; a session whose release succeeded holds nothing (it took
    /// one lock, once), so it is kept for reuse.
    async fn release(&self) -> Result<()> {
        let release = "SELECT RELEASE_LOCK(?)";
        // Dropped on every path but a clean one: a killed session frees
        // whatever it held, also when this future is cancelled.
        let Some(mut session) = self.session.lock().await.take() else {
            return Err(self.gone("it was released already"));
        };
        let asked = session
            .conn()
            .exec_first::<Option<i64>, _, _>(release, (&self.lock,));
        match tokio::time::timeout(self.bound, asked).await {
            Ok(Ok(answer)) => {
                if answer.flatten() == Some(1) {
                    session.settled();
                    self.sessions.put(session);
                    Ok(())
                } else {
                    Err(self.gone("the session did not hold it"))
                }
            }
            Ok(Err(e)) if is_gone(&e) => Err(self.gone(&format!("its session ended ({e})"))),
            Ok(Err(e)) => Err(from_mysql(e, "release a named lock")),
            Err(_) => Err(timed_out("release a named lock", self.bound)),
        }
    }

    fn release_blocking(&self) {
        // Ending the session frees the lock.
        if let Ok(mut session) = self.session.try_lock()
            && let Some(mut session) = session.take()
        {
            session.conn();
        }
    }
}
