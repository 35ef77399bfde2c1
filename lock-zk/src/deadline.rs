//! The caller's deadline for one acquisition, which bounds every step of it.
//!
//! An acquisition waits for the lock as its [`Wait`] allows and may then take
//! one request timeout more to finish the step in flight: at the hard
//! deadline (the end of the wait plus one request timeout) it has returned,
//! whatever the network does. Every request, and every wait for the
//! connection to come back, is cut short there, and no retry starts after it.

use std::time::Duration;

use distlock_core::Wait;
use tokio::time::Instant;

/// When waiting for the lock ends, and when the whole call must have ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// How the caller wanted to wait (for messages).
    pub(crate) wait: Wait,
    /// When waiting for the lock stops; `None` waits forever.
    pub(crate) give_up: Option<Instant>,
    /// `give_up` plus one request timeout.
    hard: Option<Instant>,
}

impl Deadline {
    /// The deadline of a call that started at `start`.
    pub(crate) fn new(wait: Wait, start: Instant, request: Duration) -> Self {
        let give_up = wait.deadline_from(start);
        Deadline {
            wait,
            give_up,
            hard: give_up.map(|at| at + request),
        }
    }

    /// The instant after which the call must not run.
    pub(crate) fn hard(&self) -> Option<Instant> {
        self.hard
    }

    /// When a step that starts now must end: one `request` timeout from now,
    /// or the hard deadline if that comes first.
    pub(crate) fn step(&self, request: Duration) -> Instant {
        let step = Instant::now() + request;
        self.hard.map_or(step, |hard| hard.min(step))
    }

    /// Whether the hard deadline has passed: no new step may start.
    pub(crate) fn is_past(&self) -> bool {
        self.hard.is_some_and(|hard| Instant::now() >= hard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_end_at_the_hard_deadline() {
        let start = Instant::now();
        let request = Duration::from_secs(5);
        let deadline = Deadline::new(Wait::Timeout(Duration::from_secs(1)), start, request);
        assert_eq!(deadline.hard(), Some(start + Duration::from_secs(6)));
        assert!(deadline.step(request) <= start + Duration::from_secs(6));
        assert!(!deadline.is_past());
        let forever = Deadline::new(Wait::Forever, start, request);
        assert!(forever.hard().is_none() && !forever.is_past());
        assert!(forever.step(request) >= start + request);
        let past = Deadline::new(Wait::No, start, Duration::ZERO);
        assert!(past.is_past());
    }
}
