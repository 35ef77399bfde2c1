//! The table layout's wake signal: a named lock per key that a mutex
//! holder keeps while it holds, so that the waiters at the head of the
//! queue block in the server (`GET_LOCK`) instead of polling, and look the
//! moment the holder lets go.
//!
//! A holder takes the signal when it is granted with waiters queued behind
//! it, else after its first renewal, in the background (so a short
//! uncontended hold costs no session and no round trip, and no renewal
//! waits for the signal); until then its waiters poll.
//!
//! The signal only ever shortens a wait: a waiter that gets it still looks,
//! and the look alone grants. A waiter that is granted keeps the signal
//! it waited for, becoming the next one's holder of it; one that is not
//! gives it back at once. A holder's release deletes its entry first and
//! only then lets go of the signal, so the waiter it wakes finds the key
//! free. A holder whose session dies frees the signal with it; its waiters
//! then look, find the grant still there, and wait by polling (see
//! [`crate::backoff`]), as they do whenever nobody holds the signal.
//!
//! The name is `distlock wake:` and the first 50 hex digits of the SHA-256
//! of the database, the table prefix and the key, each followed by a zero
//! byte: 64 characters, the servers' limit, and distinct per database.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::config::MysqlConfig;
use crate::named::MAX_NAMED_LEN;
use crate::sessions::{Session, Sessions};

/// What every wake name starts with.
const WAKE: &str = "distlock wake:";

/// The wake signal's name for `key` under `config`'s database and tables.
pub(crate) fn wake_name(config: &MysqlConfig, key: &str) -> String {
    let mut digest = Sha256::new();
    for part in [
        config.database.as_deref().unwrap_or(""),
        config.table_prefix.as_str(),
        key,
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    let hex = hex::encode(digest.finalize());
    format!("{WAKE}{}", &hex[..MAX_NAMED_LEN - WAKE.len()])
}

/// A session that holds a key's wake signal.
pub(crate) struct WakeHold {
    session: Session,
    name: String,
}

impl std::fmt::Debug for WakeHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeHold")
            .field("name", &self.name)
            .finish()
    }
}

impl WakeHold {
    /// Lets go of the signal, waking a waiter blocked on it, and keeps the
    /// session for reuse; a session that did not answer is killed, which
    /// frees the signal as well.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled release drops the session, whose kill frees
    /// the signal.
    pub(crate) async fn release(self, sessions: &Sessions, bound: Duration) {
        let WakeHold { mut session, name } = self;
        let asked = session
            .conn()
            .exec_first::<Option<i64>, _, _>("SELECT RELEASE_LOCK(?)", (&name,));
        if let Ok(Ok(Some(Some(1)))) = tokio::time::timeout(bound, asked).await {
            session.settled();
            sessions.put(session);
        }
    }

    /// Frees the signal without a runtime to wait on: the session is
    /// killed in the background (or closed), which frees what it held.
    pub(crate) fn abandon(mut self) {
        self.session.conn();
    }
}

/// A holder's wake signal: the name (mutexes only) and the hold, once
/// taken.
#[derive(Debug, Default)]
pub(crate) struct HolderWake {
    name: Option<String>,
    hold: Mutex<Option<WakeHold>>,
    /// A background attempt to take the signal is under way.
    taking: AtomicBool,
    /// Released (or abandoned): a late attempt gives the signal back.
    done: AtomicBool,
}

impl HolderWake {
    /// The signal `name` of a holder, held already or not.
    pub(crate) fn new(name: Option<String>, hold: Option<WakeHold>) -> Arc<Self> {
        Arc::new(HolderWake {
            name,
            hold: Mutex::new(hold),
            ..HolderWake::default()
        })
    }

    /// Takes the signal in the background if this holder has a name for
    /// it but no hold yet (it stays without when another session has it):
    /// a renewal never waits for it, so it can never make one late.
    pub(crate) fn keep_in_background(self: &Arc<Self>, sessions: &Arc<Sessions>, bound: Duration) {
        let Some(name) = self.name.clone() else {
            return;
        };
        if self.done.load(Ordering::Acquire)
            || self.slot().is_some()
            || self.taking.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let (wake, sessions) = (self.clone(), sessions.clone());
        distlock_core::raw::spawn_background(async move {
            if let Some(hold) = take_now(&sessions, None, &name, bound).await {
                let late = {
                    let mut slot = wake.slot();
                    if wake.done.load(Ordering::Acquire) || slot.is_some() {
                        Some(hold)
                    } else {
                        *slot = Some(hold);
                        None
                    }
                };
                if let Some(late) = late {
                    late.release(&sessions, bound).await;
                }
            }
            wake.taking.store(false, Ordering::Release);
        });
    }

    /// Lets go of the signal, if held (see [`WakeHold::release`]).
    ///
    /// # Cancel safety
    ///
    /// As [`WakeHold::release`].
    pub(crate) async fn release(&self, sessions: &Sessions, bound: Duration) {
        self.done.store(true, Ordering::Release);
        let hold = self.slot().take();
        if let Some(hold) = hold {
            hold.release(sessions, bound).await;
        }
    }

    /// Frees the signal without waiting (see [`WakeHold::abandon`]).
    pub(crate) fn abandon(&self) {
        self.done.store(true, Ordering::Release);
        if let Some(hold) = self.slot().take() {
            hold.abandon();
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<WakeHold>> {
        self.hold.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Takes `name` at once on a session lent by `sessions` (or `spare`):
/// `None` when another session holds it, none may be lent, or the server
/// did not answer. Used by a holder granted without the signal.
///
/// # Cancel safety
///
/// Cancel safe: a cancelled attempt drops (and kills) its session, which
/// holds nothing afterwards.
pub(crate) async fn take_now(
    sessions: &Arc<Sessions>,
    spare: Option<Session>,
    name: &str,
    bound: Duration,
) -> Option<WakeHold> {
    let session = match spare {
        Some(session) => session,
        None => tokio::time::timeout(bound, sessions.lend())
            .await
            .ok()??
            .ok()?,
    };
    match wait(session, name, Duration::ZERO, bound).await {
        Ok(hold) => Some(hold),
        Err(spare) => {
            if let Some(spare) = spare {
                sessions.put(spare);
            }
            None
        }
    }
}

/// Waits up to `wait` for `name` on `session` (`GET_LOCK(name, wait)`, the
/// wait in fractional seconds, which MariaDB counts in microseconds):
/// `Ok(hold)` when the signal came free and is now ours, `Err(spare)` when
/// the wait ran out, with the session if it answered cleanly. `bound` is
/// added to the wait on the client, for a server that does not answer.
///
/// # Cancel safety
///
/// Cancel safe: a cancelled wait drops (and kills) its session, so a
/// signal granted just then is freed with it.
pub(crate) async fn wait(
    mut session: Session,
    name: &str,
    wait: Duration,
    bound: Duration,
) -> std::result::Result<WakeHold, Option<Session>> {
    let until = Instant::now() + wait + bound;
    let asked = session
        .conn()
        .exec_first::<Option<i64>, _, _>("SELECT GET_LOCK(?, ?)", (name, wait.as_secs_f64()));
    match tokio::time::timeout_at(until, asked).await {
        Ok(Ok(Some(Some(1)))) => {
            session.settled();
            Ok(WakeHold {
                session,
                name: name.to_owned(),
            })
        }
        Ok(Ok(Some(Some(0)))) => {
            session.settled();
            Err(Some(session))
        }
        // NULL, an error or no answer: the session may hold anything, so
        // it is dropped (and killed).
        _ => Err(None),
    }
}
