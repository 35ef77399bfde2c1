//! How long a waiter waits between two looks at its queue.
//!
//! MySQL has no `LISTEN`/`NOTIFY`. A mutex waiter at the head of the queue
//! (next in line, or with one waiter ahead) waits on the key's wake signal
//! (see [`crate::wake`]) for up to [`Backoff::wake_wait`]: TTL/3, which
//! keeps its own queue entry alive, and no later than the first grant
//! ahead runs out (plus [`MIN_NAP`]). Every other waiter, and a head
//! waiter whose last signal came without a grant (nobody held it), naps:
//! [`MIN_NAP`] when it is next in line, has one waiter ahead, or moved up
//! since its last look, else twice its last nap, up to [`MAX_NAP`]. No nap
//! passes the moment the grant ahead runs out (plus `MIN_NAP`), nor TTL/3.
//! So a queue that moves is looked at often, and one that stands still
//! costs one look per `MAX_NAP` for each waiter past the first two.

use std::time::Duration;

use crate::look::Place;

/// The first nap, and the shortest.
pub(crate) const MIN_NAP: Duration = Duration::from_millis(5);
/// The longest nap once a wait is long.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(100);

/// A waiter's nap schedule.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
    ceiling: Duration,
    keep_alive: Duration,
    /// Waiters ahead at the last look.
    ahead: Option<usize>,
}

impl Backoff {
    /// The schedule of a waiter whose lease is `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        Backoff {
            next: MIN_NAP,
            ceiling: MAX_NAP.min(ttl / 3).max(MIN_NAP),
            keep_alive: (ttl / 3).max(MIN_NAP),
            ahead: None,
        }
    }

    /// The nap before the next look, given where the waiter stands.
    pub(crate) fn next(&mut self, place: &Place) -> Duration {
        let moved = self
            .ahead
            .is_some_and(|before| place.waiters_ahead < before);
        self.ahead = Some(place.waiters_ahead);
        let nap = if place.next_in_line || place.waiters_ahead <= 1 || moved {
            MIN_NAP
        } else {
            self.next
        };
        self.next = (nap * 2).min(self.ceiling);
        match place.first_ends_in {
            Some(ends) => nap.min(ends + MIN_NAP),
            None => nap,
        }
        .max(MIN_NAP)
    }

    /// The longest wait on the wake signal before looking again.
    pub(crate) fn wake_wait(&self, place: &Place) -> Duration {
        match place.first_ends_in {
            Some(ends) => self.keep_alive.min(ends + MIN_NAP),
            None => self.keep_alive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(waiters_ahead: usize, first_ends_in: Option<Duration>) -> Place {
        Place {
            first_ends_in,
            waiters_ahead,
            next_in_line: waiters_ahead == 0,
        }
    }

    #[test]
    fn naps_double_up_to_the_ceiling_and_never_pass_an_expiry_ahead() {
        let mut backoff = Backoff::new(Duration::from_secs(10));
        let naps: Vec<_> = (0..7).map(|_| backoff.next(&place(3, None))).collect();
        assert_eq!(naps[0], MIN_NAP);
        assert!(naps.windows(2).all(|w| w[1] >= w[0]), "{naps:?}");
        assert_eq!(*naps.last().unwrap(), MAX_NAP);
        assert_eq!(backoff.next(&place(3, Some(Duration::ZERO))), MIN_NAP);
        let mut short = Backoff::new(Duration::from_millis(300));
        for _ in 0..10 {
            assert!(short.next(&place(3, None)) <= Duration::from_millis(100));
        }
    }

    #[test]
    fn the_head_of_the_queue_and_a_moving_queue_nap_briefly() {
        let mut backoff = Backoff::new(Duration::from_secs(10));
        for _ in 0..7 {
            backoff.next(&place(5, None));
        }
        // Moved up: it starts over.
        assert_eq!(backoff.next(&place(4, None)), MIN_NAP);
        assert!(backoff.next(&place(4, None)) > MIN_NAP);
        assert_eq!(backoff.next(&place(1, None)), MIN_NAP);
        assert_eq!(backoff.next(&place(1, None)), MIN_NAP);
        assert_eq!(backoff.next(&place(0, None)), MIN_NAP);
    }

    #[test]
    fn a_wake_wait_ends_by_ttl_over_three_and_the_expiry_ahead() {
        let backoff = Backoff::new(Duration::from_secs(9));
        assert_eq!(backoff.wake_wait(&place(0, None)), Duration::from_secs(3));
        let ends = Some(Duration::from_millis(40));
        assert_eq!(
            backoff.wake_wait(&place(0, ends)),
            Duration::from_millis(45)
        );
    }
}
