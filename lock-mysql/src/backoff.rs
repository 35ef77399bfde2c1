//! How long a waiter sleeps between two looks at its queue.
//!
//! MySQL has no `LISTEN`/`NOTIFY`, so a waiter learns that it may be
//! granted only by looking again. The waiter that is next in line (only
//! grants block it, no other waiter goes first) looks every [`MIN_NAP`]:
//! a release lets it in within that. Every other waiter looks soon after
//! queueing and then less and less often, doubling its nap up to
//! [`MAX_NAP`], and starts again from `MIN_NAP` once it becomes next. No
//! nap passes the moment the grant ahead runs out (plus `MIN_NAP`), nor
//! TTL/3, which also keeps the waiter's own queue entry alive. Each look is
//! one short transaction on the key's row, so a key costs one look per
//! `MIN_NAP` for its next waiter, and one per `MAX_NAP` for each of the
//! others once their wait is long.

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
    /// out (if the server said) and whether the waiter is next in line.
    pub(crate) fn next(&mut self, first_ends_in: Option<Duration>, next_in_line: bool) -> Duration {
        let mut nap = self.next;
        self.next = if next_in_line {
            MIN_NAP
        } else {
            (self.next * 2).min(self.ceiling)
        };
        if next_in_line {
            nap = MIN_NAP;
        }
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
        let naps: Vec<_> = (0..7).map(|_| backoff.next(None, false)).collect();
        assert_eq!(naps[0], MIN_NAP);
        assert!(naps.windows(2).all(|w| w[1] >= w[0]), "{naps:?}");
        assert_eq!(*naps.last().unwrap(), MAX_NAP);
        assert_eq!(backoff.next(Some(Duration::ZERO), false), MIN_NAP);
        // Next in line: it looks every MIN_NAP, and starts over afterwards.
        assert_eq!(backoff.next(None, true), MIN_NAP);
        assert_eq!(backoff.next(None, false), MIN_NAP);
        let mut short = Backoff::new(Duration::from_millis(300));
        for _ in 0..10 {
            assert!(short.next(None, false) <= Duration::from_millis(100));
        }
    }
}
