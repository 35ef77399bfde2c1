//! Lease renewal for many leases from one task.
//!
//! Every lease renewed per lock needs a renewal every TTL/3. A task and a
//! timer per lease cost about half a kilobyte each, and a process may hold
//! tens of thousands of locks. A [`Renewer`] keeps one schedule instead (the
//! leases ordered by when they are next due) and one driver task: it sleeps
//! until the first lease is due, runs the renewals that are due side by
//! side, and puts each lease back in the schedule from its outcome. The
//! driver exits when nothing is left to renew, and the next lease starts it
//! again on the runtime in use then.
//!
//! For each lease the rules are those of a loop of its own: renew TTL/3
//! after the last successful renewal was sent (sooner when little validity
//! is left), retry an attempt of unknown outcome after TTL/10, and fire the
//! lost signal when renewal reports the lease gone or the validity deadline
//! passes first.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until, timeout};

use crate::clock::SentAt;
use crate::error::{ErrorKind, Result};
use crate::lost::{LossNotifier, LostReason};
use crate::renewal::Validity;

/// A renewal call: resolves `Ok` when the server extended the lease by its TTL,
/// `Err` of kind `LeaseLost` or `NotHeld` when the lease is gone, or another
/// error (retried) when the outcome is unknown.
pub type RenewFn = Box<dyn FnMut() -> BoxFuture<'static, Result<()>> + Send>;

/// Renews leases from one task: a backend keeps one and passes it to every
/// lease it grants. Cloning shares the schedule.
///
/// The driver task runs on the runtime that scheduled the first lease after
/// an idle spell. A backend's connections live on one runtime, and so do
/// its renewals.
#[derive(Clone, Default)]
pub struct Renewer {
    shared: Arc<Shared>,
}

impl fmt::Debug for Renewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("Renewer")
            .field("scheduled", &state.due.len())
            .field("driving", &state.driving)
            .finish()
    }
}

impl Renewer {
    /// An empty schedule; its driver starts with the first lease.
    pub fn new() -> Self {
        Self::default()
    }

    /// Renews a lease of `ttl` until the returned task is dropped, keeping
    /// `validity` up to date and firing `notifier` when the lease is lost:
    /// [`LostReason::RenewalFailed`] when `renew` reports it gone,
    /// [`LostReason::DeadlineMissed`] when `validity` runs out before a
    /// renewal succeeds. The first renewal is TTL/3 from now, or sooner when
    /// `validity` has less than that left.
    ///
    /// Must be called within a Tokio runtime.
    pub fn schedule(
        &self,
        ttl: Duration,
        validity: Validity,
        notifier: LossNotifier,
        renew: RenewFn,
    ) -> RenewalTask {
        let first = Schedule::new(ttl).after_success(Duration::ZERO, validity.remaining());
        let mut state = self.shared.state();
        let id = state.next_id;
        state.next_id += 1;
        let entry = Arc::new(Entry {
            id,
            ttl,
            validity,
            notifier,
            renew: Mutex::new(renew),
            slot: Mutex::new(Slot::Stopped),
        });
        self.shared
            .put_back(&mut state, entry.clone(), Instant::now() + first);
        RenewalTask {
            entry,
            shared: self.shared.clone(),
        }
    }
}

/// One lease's place in a [`Renewer`]'s schedule. Dropping it stops the
/// renewal at once: the lease leaves the schedule, and an attempt in
/// flight is dropped (its outcome is never looked at).
pub struct RenewalTask {
    entry: Arc<Entry>,
    shared: Arc<Shared>,
}

impl fmt::Debug for RenewalTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenewalTask")
            .field("ttl", &self.entry.ttl)
            .field("remaining", &self.entry.validity.remaining())
            .finish()
    }
}

impl Drop for RenewalTask {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        match std::mem::replace(&mut *self.entry.slot(), Slot::Stopped) {
            Slot::Waiting(at) => {
                state.due.remove(&(at, self.entry.id));
            }
            Slot::Renewing(attempt) => attempt.abort(),
            Slot::Stopped => {}
        }
    }
}

/// What a renewer's handles and its driver share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the driver when a lease is due before the one it sleeps for.
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Leases waiting for their next renewal, by due time (ties by id).
    due: BTreeMap<(Instant, u64), Arc<Entry>>,
    next_id: u64,
    /// Whether a driver task is running.
    driving: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Schedules `entry` for `at`, starting a driver if none runs.
    fn put_back(self: &Arc<Self>, state: &mut State, entry: Arc<Entry>, at: Instant) {
        *entry.slot() = Slot::Waiting(at);
        let sooner = state.due.keys().next().is_none_or(|(first, _)| at < *first);
        state.due.insert((at, entry.id), entry);
        if !state.driving {
            state.driving = true;
            tokio::spawn(drive(self.clone()));
        } else if sooner {
            self.wake.notify_one();
        }
    }

    /// Puts `entry` back after an attempt, unless it was stopped meanwhile.
    fn after_attempt(self: &Arc<Self>, entry: Arc<Entry>, wait: Option<Duration>) {
        let mut state = self.state();
        if !matches!(*entry.slot(), Slot::Renewing(_)) {
            return;
        }
        match wait {
            Some(wait) => self.put_back(&mut state, entry, Instant::now() + wait),
            None => *entry.slot() = Slot::Stopped,
        }
    }
}

/// The driver: starts the attempts that are due and sleeps until the next.
async fn drive(shared: Arc<Shared>) {
    let mut running = Running(Some(&shared));
    let mut attempts = FuturesUnordered::new();
    loop {
        let next = {
            let mut state = shared.state();
            let now = Instant::now();
            while let Some(due) = state.due.first_entry() {
                if due.key().0 > now {
                    break;
                }
                let entry = due.remove();
                let (abort, registration) = AbortHandle::new_pair();
                *entry.slot() = Slot::Renewing(abort);
                let attempt = attempt(shared.clone(), entry);
                attempts.push(Abortable::new(attempt, registration));
            }
            if state.due.is_empty() && attempts.is_empty() {
                state.driving = false;
                running.0 = None;
                return;
            }
            state.due.keys().next().map(|(at, _)| *at)
        };
        let sleep = async {
            match next {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some(_) = attempts.next(), if !attempts.is_empty() => {}
            () = shared.wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// Marks the renewer driverless if the driver is dropped mid-way (its
/// runtime shut down), so that the next lease starts a new one.
struct Running<'a>(Option<&'a Shared>);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.state().driving = false;
        }
    }
}

/// One renewal attempt of `entry`, then its next place in the schedule.
async fn attempt(shared: Arc<Shared>, entry: Arc<Entry>) {
    let wait = entry.renew_once().await;
    shared.after_attempt(entry, wait);
}

/// One lease in a renewer's schedule.
struct Entry {
    id: u64,
    ttl: Duration,
    validity: Validity,
    notifier: LossNotifier,
    renew: Mutex<RenewFn>,
    /// Where the lease is in the schedule; changed under `State`'s lock.
    slot: Mutex<Slot>,
}

enum Slot {
    /// In `State::due`, for this time.
    Waiting(Instant),
    /// An attempt is in flight; aborting it drops it.
    Renewing(AbortHandle),
    /// Out of the schedule for good: lost, or its task was dropped.
    Stopped,
}

impl Entry {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renews once. Returns the wait before the next attempt, or `None`
    /// when the lease is lost (the notifier has fired) and renewal ends.
    async fn renew_once(&self) -> Option<Duration> {
        let schedule = Schedule::new(self.ttl);
        if self.notifier.is_fired() {
            return None;
        }
        let remaining = self.validity.remaining();
        if remaining.is_zero() {
            self.notifier.fire(LostReason::DeadlineMissed);
            return None;
        }
        let sent = SentAt::now_on(self.validity.clock().clone());
        // A panicking renewal must not take the other leases' driver down
        // with it; the lease it was renewing can no longer be vouched for.
        let outcome = AssertUnwindSafe(async {
            let renewal = (self.renew.lock().unwrap_or_else(|p| p.into_inner()))();
            timeout(remaining, renewal).await
        })
        .catch_unwind()
        .await;
        match outcome {
            Ok(Ok(Ok(()))) if self.validity.renewed_at(&sent, self.ttl) => {
                Some(schedule.after_success(sent.elapsed(), self.validity.remaining()))
            }
            Ok(Ok(Ok(()))) | Ok(Err(_)) => {
                self.notifier.fire(LostReason::DeadlineMissed);
                None
            }
            Ok(Ok(Err(e))) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => {
                self.notifier.fire(LostReason::RenewalFailed(e.to_string()));
                None
            }
            Ok(Ok(Err(e))) => {
                tracing::debug!(error = %e, "lease renewal failed; retrying");
                Some(schedule.after_failure(self.validity.remaining()))
            }
            Err(_) => {
                self.notifier.fire(LostReason::RenewalFailed(
                    "the backend's renewal call panicked".to_owned(),
                ));
                None
            }
        }
    }
}

/// When renewal runs relative to the lease.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// Renew this long after the last successful renewal was sent.
    period: Duration,
    /// Retry an attempt of unknown outcome after this long.
    retry: Duration,
    /// Always start an attempt at least this long before the deadline, so
    /// that a lease granted late in its TTL is still renewed in time.
    margin: Duration,
}

impl Schedule {
    fn new(ttl: Duration) -> Self {
        let floor = Duration::from_millis(1);
        Schedule {
            period: (ttl / 3).max(floor),
            retry: (ttl / 10).max(floor),
            margin: ttl / 6,
        }
    }

    /// The wait before the next attempt, after one sent `since_sent` ago succeeded.
    fn after_success(&self, since_sent: Duration, remaining: Duration) -> Duration {
        self.period
            .saturating_sub(since_sent)
            .min(remaining.saturating_sub(self.margin))
    }

    /// The wait before retrying an attempt whose outcome is unknown: never
    /// past half of what is left, so a few more tries fit before the deadline.
    fn after_failure(&self, remaining: Duration) -> Duration {
        self.retry.min(remaining / 2).max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_granted_late_is_renewed_before_its_deadline() {
        let schedule = Schedule::new(Duration::from_secs(3));
        // Granted with 0.2 s of validity left: the period (1 s) would be too late.
        let wait = schedule.after_success(Duration::ZERO, Duration::from_millis(200));
        assert_eq!(wait, Duration::ZERO);
        // Granted with 0.9 s left: renew 0.4 s before the deadline.
        let wait = schedule.after_success(Duration::ZERO, Duration::from_millis(900));
        assert_eq!(wait, Duration::from_millis(400));
        // Fresh: the period.
        let wait = schedule.after_success(Duration::ZERO, Duration::from_millis(2970));
        assert_eq!(wait, Duration::from_secs(1));
    }
}
