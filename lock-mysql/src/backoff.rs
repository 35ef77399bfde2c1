//! How long a waiter sleeps between two looks at its queue.
//!
//! MySQL has no `LISTEN`/`NOTIFY`, so a waiter learns that it may be
//! granted only by looking again. It looks soon after queueing (a holder's
//! work is often short) and then less and less often, doubling the nap up
//! to [`MAX_NAP`]; never past the moment the grant ahead of it runs out
//! (plus [`MIN_NAP`]), and at least every TTL/3, which also keeps its own
//! queue entry alive. Each look is one short transaction on the key's row,
//! so a waiter costs at most one transaction per `MAX_NAP` once its wait
//! is long, and a hand-off takes at most `MAX_NAP` after a release.

use std::time::Duration;

/// The first nap, and the shortest.
pub(crate) const MIN_NAP: Duration = Duration::from_millis(5);
/// The longest nap once a wait is long.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(100);

/// A waiter's nap schedule.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
    ceiling: Duration,
}

impl Backoff {
    /// The schedule of a waiter whose lease is `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        Backoff {
            next: MIN_NAP,
            ceiling: MAX_NAP.min(ttl / 3).max(MIN_NAP),
        }
    }

    /// The nap before the next look, given when the first grant ahead runs
    /// out (if the server said).
    pub(crate) fn next(&mut self, first_ends_in: Option<Duration>) -> Duration {
        let mut nap = self.next;
        self.next = (self.next * 2).min(self.ceiling);
        if let Some(ends) = first_ends_in {
            nap = nap.min(ends + MIN_NAP);
        }
        nap.max(MIN_NAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naps_double_up_to_the_ceiling_and_never_pass_an_expiry_ahead() {
        let mut backoff = Backoff::new(Duration::from_secs(10));
        let naps: Vec<_> = (0..7).map(|_| backoff.next(None)).collect();
        assert_eq!(naps[0], MIN_NAP);
        assert!(naps.windows(2).all(|w| w[1] >= w[0]), "{naps:?}");
        assert_eq!(*naps.last().unwrap(), MAX_NAP);
        assert_eq!(backoff.next(Some(Duration::ZERO)), MIN_NAP);
        let mut short = Backoff::new(Duration::from_millis(300));
        for _ in 0..10 {
            assert!(short.next(None) <= Duration::from_millis(100));
        }
    }
}
