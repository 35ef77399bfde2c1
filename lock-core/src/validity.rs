//! How long a lease is certainly valid: a local deadline on a
//! [`LeaseClock`], moved on by each renewal. The renewals themselves are
//! scheduled by [`Renewer`](crate::renewer::Renewer).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{LeaseClock, SentAt};

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

    /// The send is stamped on the lease clock when the request goes out: a
    /// suspend between the send and the reply (which Tokio's clock, and so
    /// any Tokio instant, does not count) still comes off the lease.
    #[test]
    fn a_suspend_between_send_and_reply_comes_off_the_validity() {
        let (clock, sent) = manual();
        clock.advance(Duration::from_secs(60));
        let validity = Validity::from_sent(&sent, Duration::from_secs(10));
        assert!(!validity.is_valid());
        // And for a renewal: sent before a suspend that outlasts the lease.
        let (clock, sent) = manual();
        let validity = Validity::from_sent(&sent, Duration::from_secs(10));
        let renewal = SentAt::now_on(clock.clone());
        clock.advance(Duration::from_secs(60));
        assert!(!validity.renewed_at(&renewal, Duration::from_secs(10)));
        assert!(!validity.is_valid());
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
}
