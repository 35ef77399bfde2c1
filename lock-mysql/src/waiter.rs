//! How a blocked table-layout acquisition waits for its next look: on the
//! key's wake signal at the head of a mutex queue, else by napping (see
//! [`crate::backoff`] for the schedule and [`crate::wake`] for the signal).

use std::sync::Arc;
use std::time::Duration;

use distlock_core::Access;
use tokio::time::Instant;

use crate::backend::Inner;
use crate::backoff::{Backoff, MAX_NAP};
use crate::look::Place;
use crate::sessions::Session;
use crate::wake::{self, HolderWake, WakeHold};

/// One acquisition's waiting between looks.
#[derive(Debug)]
pub(crate) struct Waiter {
    inner: Arc<Inner>,
    /// The key's wake signal; only mutexes (write access) use one, as only
    /// they have a single holder to keep it.
    wake: Option<String>,
    backoff: Backoff,
    /// A session for waiting on the signal, holding nothing.
    spare: Option<Session>,
    /// The signal, got by the last wait, until the look after it decides.
    hold: Option<WakeHold>,
    /// The last signal came without a grant (nobody held it, or its
    /// session failed): nap until then before waiting on it again, so a
    /// free signal costs at most a look and two round trips per retry.
    nap_until: Option<Instant>,
}

impl Waiter {
    /// The waiter of an acquisition of `key` with `access` and lease `ttl`.
    pub(crate) fn new(inner: &Arc<Inner>, key: &str, access: Access, ttl: Duration) -> Self {
        Waiter {
            inner: inner.clone(),
            wake: (access == Access::Write).then(|| wake::wake_name(&inner.config, key)),
            backoff: Backoff::new(ttl),
            spare: None,
            hold: None,
            nap_until: None,
        }
    }

    /// Waits after a look that found the attempt at `place`, until the
    /// signal comes, the schedule's nap ends, or `deadline`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a session dropped mid-request is killed, so a signal
    /// granted just then is freed with it.
    pub(crate) async fn pause(&mut self, place: &Place, deadline: Option<Instant>) {
        let bound = self.inner.config.request_timeout;
        if let Some(hold) = self.hold.take() {
            // Woken, and the look did not grant: pass the signal on.
            hold.release(&self.inner.sessions, bound).await;
            self.signal_failed();
        }
        let nap = self.backoff.next(place);
        let head = place.next_in_line || place.waiters_ahead <= 1;
        let napping = self.nap_until.is_some_and(|until| Instant::now() < until);
        if let (Some(name), true, false) = (self.wake.clone(), head, napping) {
            let mut wait = self.backoff.wake_wait(place);
            if let Some(deadline) = deadline {
                wait = wait.min(deadline.saturating_duration_since(Instant::now()));
            }
            if let Some(session) = self.session().await {
                match wake::wait(session, &name, wait, bound).await {
                    Ok(hold) => self.hold = Some(hold),
                    Err(Some(spare)) => self.spare = Some(spare),
                    // The session failed: nap before the next try.
                    Err(None) => self.signal_failed(),
                }
                return;
            }
        }
        let wake_at = Instant::now() + nap;
        tokio::time::sleep_until(deadline.map_or(wake_at, |d| d.min(wake_at))).await;
    }

    /// The attempt was granted; `behind` says whether waiters came after
    /// it. Returns the signal for its holder to keep: the one it waited
    /// for, else (when someone waits behind) one taken now, if free.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the sessions are dropped (and killed if busy).
    pub(crate) async fn granted(mut self, behind: bool) -> Arc<HolderWake> {
        let name = self.wake.take();
        let mut hold = self.hold.take();
        if let (Some(wake), None, true) = (&name, &hold, behind) {
            let bound = self.inner.config.request_timeout;
            hold = wake::take_now(&self.inner.sessions, self.spare.take(), wake, bound).await;
        }
        self.put_spare();
        HolderWake::new(name, hold)
    }

    /// The acquisition gave up: the signal and sessions go back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Waiter::pause`].
    pub(crate) async fn finish(mut self) {
        if let Some(hold) = self.hold.take() {
            let bound = self.inner.config.request_timeout;
            hold.release(&self.inner.sessions, bound).await;
        }
        self.put_spare();
    }

    /// The signal came without a grant, or failed: poll for a while.
    fn signal_failed(&mut self) {
        self.nap_until = Some(Instant::now() + MAX_NAP);
    }

    fn put_spare(&mut self) {
        if let Some(spare) = self.spare.take() {
            self.inner.sessions.put(spare);
        }
    }

    /// A session to wait on: the spare one, else a newly lent one; `None`
    /// when none may be lent or none could be had within the connect
    /// timeout (the waiter then naps).
    async fn session(&mut self) -> Option<Session> {
        if let Some(spare) = self.spare.take() {
            return Some(spare);
        }
        let bound = self.inner.config.connect_timeout;
        match tokio::time::timeout(bound, self.inner.sessions.lend()).await {
            Ok(Some(Ok(session))) => Some(session),
            _ => None,
        }
    }
}
