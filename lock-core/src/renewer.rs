//! Lease renewal for many leases from one task per runtime.
//!
//! Every lease renewed per lock needs a renewal every TTL/3. A task and a
//! timer per lease cost about half a kilobyte each, and a process may hold
//! tens of thousands of locks. A [`Renewer`] keeps one schedule instead (the
//! leases ordered by when they are next due) and one driver task: it sleeps
//! until the first lease is due, runs the renewals that are due side by
//! side, and puts each lease back in the schedule from its outcome. The
//! driver exits when nothing is left to renew, and the next lease starts it
//! again.
//!
//! Programs often run several Tokio runtimes (tests, `block_on` helpers, a
//! library with a private runtime), and a task only runs while its runtime
//! is driven. So the schedule has one lane per runtime: a lease is renewed
//! by a driver on the runtime that scheduled it, as a task of its own would
//! be, and a runtime that is idle or gone never holds up another's leases.
//! When a runtime shuts down, its driver's leases can no longer be renewed:
//! their lost signals fire at once rather than letting a guard vouch for a
//! lease nobody renews.
//!
//! For each lease the rules are those of a loop of its own: renew TTL/3
//! after the last successful renewal was sent (sooner when little validity
//! is left), retry an attempt of unknown outcome after TTL/10, report
//! failing renewals on the lost signal while validity is left, and fire the
//! lost signal when renewal reports the lease gone or the validity deadline
//! passes first.
//!
//! Locks taken together would renew together, every period, in one burst
//! at the server. So a lease's first renewal comes at a phase of its own,
//! between TTL/6 and TTL/3 after it is scheduled, spread evenly over the
//! leases a renewer has scheduled; each later renewal keeps that phase. A
//! renewal only ever comes earlier than TTL/3, never later, so the margin
//! before the deadline is what it would be without the spread.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::runtime::{Handle, Id as RuntimeId};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::clock::SentAt;
use crate::error::{ErrorKind, Result};
use crate::lost::{LossNotifier, LostReason};
use crate::telemetry;
use crate::validity::Validity;

/// A renewal call: resolves `Ok` when the server extended the lease by its TTL,
/// `Err` of kind `LeaseLost` or `NotHeld` when the lease is gone, or another
/// error (retried) when the outcome is unknown.
pub type RenewFn = Box<dyn FnMut() -> BoxFuture<'static, Result<()>> + Send>;

/// Renews leases from one task per runtime: a backend keeps one and passes
/// it to every lease it grants. Cloning shares the schedule.
#[derive(Clone, Default)]
pub struct Renewer {
    shared: Arc<Shared>,
}

impl fmt::Debug for Renewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        let scheduled: usize = state.lanes.values().map(|lane| lane.due.len()).sum();
        f.debug_struct("Renewer")
            .field("scheduled", &scheduled)
            .field("runtimes", &state.lanes.len())
            .finish()
    }
}

impl Renewer {
    /// An empty schedule; a driver starts with the first lease.
    pub fn new() -> Self {
        Self::default()
    }

    /// Renews a lease of `ttl` until the returned task is dropped, keeping
    /// `validity` up to date and firing `notifier` when the lease is lost:
    /// [`LostReason::RenewalFailed`] when `renew` reports it gone,
    /// [`LostReason::DeadlineMissed`] when `validity` runs out before a
    /// renewal succeeds. While renewals fail with validity left, `notifier`
    /// says so ([`LossNotifier::renewal_failing`]). The first renewal is
    /// between TTL/6 and TTL/3 from now, at the lease's own phase, and
    /// sooner when `validity` has less than that left.
    /// `backend` labels the lease in the metrics.
    ///
    /// The lease is renewed on the Tokio runtime this is called on. Called
    /// outside any runtime, nothing could renew it: the lost signal fires
    /// at once.
    pub fn schedule(
        &self,
        backend: &'static str,
        ttl: Duration,
        validity: Validity,
        notifier: LossNotifier,
        renew: RenewFn,
    ) -> RenewalTask {
        let runtime = Handle::try_current().ok();
        let mut state = self.shared.state();
        let id = state.next_id;
        state.next_id += 1;
        let first = Schedule::new(ttl).first(id, validity.remaining());
        let entry = Arc::new(Entry {
            id,
            lane: runtime.as_ref().map(Handle::id),
            backend,
            ttl,
            validity,
            notifier,
            renew: Mutex::new(renew),
            slot: Mutex::new(Slot::Stopped),
        });
        let task = RenewalTask {
            entry: entry.clone(),
            shared: self.shared.clone(),
        };
        match runtime {
            Some(runtime) => {
                self.shared
                    .put_back(&mut state, &runtime, entry, Instant::now() + first);
            }
            None => {
                drop(state);
                entry.notifier.fire(LostReason::RenewalFailed(
                    "no Tokio runtime was running to renew its lease".to_owned(),
                ));
            }
        }
        task
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
        let slot = std::mem::replace(&mut *self.entry.slot(), Slot::Stopped);
        match slot {
            Slot::Waiting(at) => {
                if let Some(lane) = self.entry.lane.and_then(|id| state.lanes.get_mut(&id)) {
                    lane.due.remove(&(at, self.entry.id));
                }
            }
            Slot::Renewing(attempt) => attempt.abort(),
            Slot::Stopped => {}
        }
    }
}

/// What a renewer's handles and its drivers share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// One schedule per runtime with leases to renew.
    lanes: HashMap<RuntimeId, Lane>,
    next_id: u64,
}

/// The leases one runtime renews, and its driver.
struct Lane {
    /// Leases waiting for their next renewal, by due time (ties by id).
    due: BTreeMap<(Instant, u64), Arc<Entry>>,
    /// When the driver wakes by itself next: the due time it sleeps for,
    /// which may belong to a lease stopped since. `None` while it has no
    /// time to wake at (none computed yet, or only attempts in flight).
    wakes_at: Option<Instant>,
    /// Wakes the driver when a lease is due before it wakes by itself.
    wake: Arc<Notify>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Schedules `entry` for `at` in the lane of `runtime`, starting that
    /// lane's driver if it has none.
    fn put_back(
        self: &Arc<Self>,
        state: &mut State,
        runtime: &Handle,
        entry: Arc<Entry>,
        at: Instant,
    ) {
        *entry.slot() = Slot::Waiting(at);
        let id = runtime.id();
        match state.lanes.get_mut(&id) {
            Some(lane) => {
                // A lease due no sooner than the driver wakes anyway waits
                // for that: waking the driver for each new lease would cost
                // every acquisition a thread wake-up.
                let sooner = lane.wakes_at.is_none_or(|wakes| at < wakes);
                lane.due.insert((at, entry.id), entry);
                if sooner {
                    lane.wake.notify_one();
                }
            }
            None => {
                let wake = Arc::new(Notify::new());
                let mut due = BTreeMap::new();
                due.insert((at, entry.id), entry);
                state.lanes.insert(
                    id,
                    Lane {
                        due,
                        wakes_at: None,
                        wake: wake.clone(),
                    },
                );
                // The guard goes into the task before it is spawned: a task
                // its runtime drops without ever polling it still ends the lane.
                let driver = Driver {
                    shared: self.clone(),
                    lane: id,
                    done: false,
                };
                runtime.spawn(drive(driver, wake));
            }
        }
    }

    /// Puts `entry` back after an attempt, unless it was stopped meanwhile.
    fn after_attempt(self: &Arc<Self>, entry: Arc<Entry>, wait: Option<Duration>) {
        let mut state = self.state();
        if !matches!(*entry.slot(), Slot::Renewing(_)) {
            return;
        }
        match wait {
            Some(wait) => {
                let runtime = Handle::current();
                self.put_back(&mut state, &runtime, entry, Instant::now() + wait);
            }
            None => *entry.slot() = Slot::Stopped,
        }
    }
}

/// One lane's driver: starts the attempts that are due and sleeps until the next.
async fn drive(mut driver: Driver, wake: Arc<Notify>) {
    let shared = driver.shared.clone();
    let mut attempts = FuturesUnordered::new();
    loop {
        let next = {
            let mut state = shared.state();
            let lane = state
                .lanes
                .get_mut(&driver.lane)
                .expect("a lane lives as long as its driver");
            let now = Instant::now();
            while let Some(due) = lane.due.first_entry() {
                if due.key().0 > now {
                    break;
                }
                let entry = due.remove();
                let (abort, registration) = AbortHandle::new_pair();
                *entry.slot() = Slot::Renewing(abort);
                let attempt = attempt(shared.clone(), entry);
                attempts.push(Abortable::new(attempt, registration));
            }
            if lane.due.is_empty() && attempts.is_empty() {
                state.lanes.remove(&driver.lane);
                driver.done = true;
                return;
            }
            lane.wakes_at = lane.due.keys().next().map(|(at, _)| *at);
            lane.wakes_at
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
            () = wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// A lane's driver task. Dropped before its lane emptied (its runtime shut
/// down, with the task running or never started), it ends the lane: the
/// leases waiting in it can no longer be renewed, so they are lost. Leases
/// with an attempt in flight are lost as their attempt is dropped.
struct Driver {
    shared: Arc<Shared>,
    lane: RuntimeId,
    done: bool,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(lane) = self.shared.state().lanes.remove(&self.lane) else {
            return;
        };
        for entry in lane.due.into_values() {
            entry.stop_with(runtime_gone());
        }
    }
}

fn runtime_gone() -> LostReason {
    LostReason::RenewalFailed("the Tokio runtime that renewed its lease shut down".to_owned())
}

/// One renewal attempt of `entry`, then its next place in the schedule.
async fn attempt(shared: Arc<Shared>, entry: Arc<Entry>) {
    let mut in_flight = InFlight {
        entry: entry.clone(),
        finished: false,
    };
    let wait = entry.renew_once().await;
    in_flight.finished = true;
    shared.after_attempt(entry, wait);
}

/// An attempt dropped before it finished: by its task being dropped (the
/// slot is `Stopped` then, nothing to do), or with its driver (the lease
/// can no longer be renewed: lost).
struct InFlight {
    entry: Arc<Entry>,
    finished: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished && matches!(*self.entry.slot(), Slot::Renewing(_)) {
            self.entry.stop_with(runtime_gone());
        }
    }
}

/// One lease in a renewer's schedule.
struct Entry {
    id: u64,
    /// The runtime whose lane renews it; `None` when scheduled outside any.
    lane: Option<RuntimeId>,
    backend: &'static str,
    ttl: Duration,
    validity: Validity,
    notifier: LossNotifier,
    renew: Mutex<RenewFn>,
    /// Where the lease is in the schedule; changed under `State`'s lock.
    slot: Mutex<Slot>,
}

enum Slot {
    /// In its lane's `due`, for this time.
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

    /// Takes the lease out of the schedule for good and fires its signal.
    fn stop_with(&self, reason: LostReason) {
        *self.slot() = Slot::Stopped;
        self.notifier.fire(reason);
    }

    /// Renews once. Returns the wait before the next attempt, or `None`
    /// when the lease is lost (the notifier has fired) and renewal ends.
    async fn renew_once(&self) -> Option<Duration> {
        let schedule = Schedule::new(self.ttl);
        if self.notifier.is_fired() {
            return None;
        }
        if !self.validity.is_valid() {
            self.notifier.fire(LostReason::DeadlineMissed);
            return None;
        }
        // The attempt may run until the validity deadline: past it, its
        // answer could no longer vouch for the lease anyway.
        let deadline = self.validity.until();
        let sent = SentAt::now_on(self.validity.clock().clone());
        // A panicking renewal must not take the other leases' driver down
        // with it; the lease it was renewing can no longer be vouched for.
        let outcome = AssertUnwindSafe(async {
            let renewal = (self.renew.lock().unwrap_or_else(|p| p.into_inner()))();
            timeout_at(deadline, renewal).await
        })
        .catch_unwind()
        .await;
        match outcome {
            Ok(Ok(Ok(()))) if self.validity.renewed_at(&sent, self.ttl) => {
                self.notifier.renewal_recovered();
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
                if self.notifier.renewal_failing(&e) {
                    telemetry::count_renewal_failing(self.backend);
                }
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

/// 2^64 divided by the golden ratio: multiplying by it spreads consecutive
/// integers evenly over the `u64` range (Fibonacci hashing).
const GOLDEN_RATIO_64: u64 = 0x9E37_79B9_7F4A_7C15;

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

    /// The wait before the first attempt of the `id`th lease scheduled:
    /// the period less a phase in [0, period/2), so that leases scheduled
    /// together renew spread over half a period. Consecutive ids take
    /// phases a golden ratio apart, which keeps any run of them evenly
    /// spread.
    fn first(&self, id: u64, remaining: Duration) -> Duration {
        let fraction = id.wrapping_mul(GOLDEN_RATIO_64) as f64 / 2f64.powi(64);
        let phase = (self.period / 2).mul_f64(fraction);
        self.after_success(phase, remaining)
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

    #[test]
    fn leases_scheduled_together_first_renew_spread_over_half_a_period() {
        let schedule = Schedule::new(Duration::from_secs(30));
        let fresh = Duration::from_secs(30);
        let waits: Vec<Duration> = (0..10_000).map(|id| schedule.first(id, fresh)).collect();
        let (half, period) = (Duration::from_secs(5), Duration::from_secs(10));
        assert!(waits.iter().all(|w| (half..=period).contains(w)));
        // Ten slices of half a second each get a tenth of the leases, give
        // or take 1 %.
        let mut slices = [0usize; 10];
        for wait in &waits {
            let slice = ((*wait - half).as_secs_f64() / 0.5) as usize;
            slices[slice.min(9)] += 1;
        }
        assert!(
            slices.iter().all(|n| n.abs_diff(1000) <= 10),
            "uneven: {slices:?}"
        );
        // Late in its TTL a lease is still renewed before its deadline.
        let late = schedule.first(3, Duration::from_secs(6));
        assert_eq!(late, Duration::from_secs(1));
    }
}
