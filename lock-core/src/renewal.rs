//! Background lease renewal with a local validity deadline.
//!
//! Every backend whose leases are renewed per lock shares this loop: renew
//! every TTL/3, track how long the lease is certainly valid on a
//! [`LeaseClock`], and fire the lost signal as soon as the lease is gone or
//! can no longer be vouched for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::clock::{LeaseClock, SentAt};
use crate::error::{ErrorKind, Result};
use crate::lost::{LossNotifier, LostReason};

/// Clock drift allowance subtracted from every lease: 1 % of the TTL plus 2 ms,
/// as in the Redlock analysis.
pub fn drift_allowance(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Until when a lease is certainly valid, measured on a [`LeaseClock`].
///
/// Set from the moment a renewal (or the acquisition) was *sent*, not when
/// its reply arrived: `sent + ttl - drift`. The server may have started the
/// TTL any time after we sent, so this never overestimates.
///
/// Once the deadline has passed, the validity stays lapsed: a renewal that
/// succeeds later does not revive it, because someone may already have been
/// told the lock is gone.
#[derive(Debug, Clone)]
pub struct Validity {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    clock: Arc<dyn LeaseClock>,
    until: Mutex<Duration>,
    lapsed: AtomicBool,
}

impl Validity {
    /// Validity of a lease granted by a request sent at `sent` (a Tokio
    /// instant), measured on the boot clock.
    pub fn starting(sent: Instant, ttl: Duration) -> Self {
        Self::from_sent(&SentAt::from_instant(sent), ttl)
    }

    /// Validity of a lease granted by a request sent at `sent`, measured on
    /// the clock `sent` was read from.
    pub fn from_sent(sent: &SentAt, ttl: Duration) -> Self {
        Validity {
            inner: Arc::new(Inner {
                clock: sent.clock().clone(),
                until: Mutex::new(valid_until(sent.at(), ttl)),
                lapsed: AtomicBool::new(false),
            }),
        }
    }

    /// The clock this validity is measured on.
    pub fn clock(&self) -> &Arc<dyn LeaseClock> {
        &self.inner.clock
    }

    fn deadline(&self) -> Duration {
        *self.inner.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long the lease is still certainly valid; zero once lapsed.
    pub fn remaining(&self) -> Duration {
        if !self.is_valid() {
            return Duration::ZERO;
        }
        self.deadline().saturating_sub(self.inner.clock.now())
    }

    /// The deadline as a Tokio instant (now plus [`remaining`](Self::remaining)).
    pub fn until(&self) -> Instant {
        Instant::now() + self.remaining()
    }

    /// Records a successful renewal sent at `sent` (a Tokio instant).
    /// Never moves the deadline back, and never revives a lapsed validity.
    pub fn renewed(&self, sent: Instant, ttl: Duration) {
        let at = self.inner.clock.now().saturating_sub(sent.elapsed());
        self.extend(at, ttl);
    }

    /// Records a successful renewal sent at `sent`; returns whether the
    /// lease is still valid. A lapsed validity stays lapsed.
    pub fn renewed_at(&self, sent: &SentAt, ttl: Duration) -> bool {
        self.extend(sent.at(), ttl)
    }

    fn extend(&self, sent: Duration, ttl: Duration) -> bool {
        let mut until = self.inner.until.lock().unwrap_or_else(|p| p.into_inner());
        if self.inner.lapsed.load(Ordering::SeqCst) || self.inner.clock.now() >= *until {
            self.inner.lapsed.store(true, Ordering::SeqCst);
            return false;
        }
        *until = (*until).max(valid_until(sent, ttl));
        true
    }

    /// Whether the deadline is still ahead. Once false, always false.
    pub fn is_valid(&self) -> bool {
        if self.inner.lapsed.load(Ordering::SeqCst) {
            return false;
        }
        if self.inner.clock.now() >= self.deadline() {
            self.inner.lapsed.store(true, Ordering::SeqCst);
            return false;
        }
        true
    }
}

fn valid_until(sent: Duration, ttl: Duration) -> Duration {
    sent + ttl.saturating_sub(drift_allowance(ttl))
}

/// A renewal call: resolves `Ok` when the server extended the lease by its TTL,
/// `Err` of kind `LeaseLost` or `NotHeld` when the lease is gone, or another
/// error (retried) when the outcome is unknown.
pub type RenewFn = Box<dyn FnMut() -> BoxFuture<'static, Result<()>> + Send>;

/// A running renewal loop; it stops when dropped.
#[derive(Debug)]
pub struct RenewalTask {
    handle: JoinHandle<()>,
}

impl Drop for RenewalTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// When renewal runs relative to the lease.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    ttl: Duration,
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
            ttl,
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

/// Starts renewing every `ttl / 3`, or sooner when the validity left is short.
///
/// The loop fires `notifier` and stops when renewal reports the lease gone
/// ([`LostReason::RenewalFailed`]), or when `validity` runs out before a
/// renewal succeeds ([`LostReason::DeadlineMissed`]). Failed renewals of
/// unknown outcome are retried every `ttl / 10` (sooner near the deadline).
pub fn spawn_renewal(
    ttl: Duration,
    validity: Validity,
    notifier: LossNotifier,
    mut renew: RenewFn,
) -> RenewalTask {
    let schedule = Schedule::new(ttl);
    let handle = tokio::spawn(async move {
        let mut wait = schedule.after_success(Duration::ZERO, validity.remaining());
        loop {
            sleep(wait).await;
            if notifier.is_fired() {
                return;
            }
            let remaining = validity.remaining();
            if remaining.is_zero() {
                notifier.fire(LostReason::DeadlineMissed);
                return;
            }
            let sent = SentAt::now_on(validity.clock().clone());
            match timeout(remaining, renew()).await {
                Ok(Ok(())) => {
                    if !validity.renewed_at(&sent, schedule.ttl) {
                        notifier.fire(LostReason::DeadlineMissed);
                        return;
                    }
                    wait = schedule.after_success(sent.elapsed(), validity.remaining());
                }
                Ok(Err(e)) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => {
                    notifier.fire(LostReason::RenewalFailed(e.to_string()));
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "lease renewal failed; retrying");
                    wait = schedule.after_failure(validity.remaining());
                }
                Err(_) => {
                    notifier.fire(LostReason::DeadlineMissed);
                    return;
                }
            }
        }
    });
    RenewalTask { handle }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn manual() -> (Arc<ManualClock>, SentAt) {
        let clock = Arc::new(ManualClock::new());
        let sent = SentAt::now_on(clock.clone());
        (clock, sent)
    }

    #[test]
    fn validity_counts_from_the_send_time_less_drift() {
        let (clock, sent) = manual();
        let ttl = Duration::from_secs(1);
        let validity = Validity::from_sent(&sent, ttl);
        assert_eq!(validity.remaining(), ttl - drift_allowance(ttl));
        clock.advance(ttl - drift_allowance(ttl));
        assert!(!validity.is_valid());
    }

    #[test]
    fn a_lapsed_validity_is_never_revived() {
        let (clock, sent) = manual();
        let ttl = Duration::from_secs(1);
        let validity = Validity::from_sent(&sent, ttl);
        clock.advance(ttl);
        assert!(!validity.is_valid());
        // A renewal sent before the deadline whose answer came after it.
        assert!(!validity.renewed_at(&sent, ttl));
        assert!(!validity.is_valid());
        let late = SentAt::now_on(clock.clone());
        assert!(!validity.renewed_at(&late, ttl));
        assert_eq!(validity.remaining(), Duration::ZERO);
    }

    #[test]
    fn a_jump_of_the_lease_clock_ends_validity_without_any_timer() {
        let (clock, sent) = manual();
        let validity = Validity::from_sent(&sent, Duration::from_secs(10));
        assert!(validity.is_valid());
        // A suspend: the lease clock jumps, no timer has fired.
        clock.advance(Duration::from_secs(60));
        assert!(!validity.is_valid());
    }

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
