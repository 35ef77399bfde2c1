//! Each client's history of operations, for a history checker: acquire,
//! release, writes and lost signals, each as an invocation followed by its
//! completion (`ok`, `fail`, or `info` when the outcome is unknown or the
//! event is a notification), with monotonic times relative to the origin
//! the runner gives every client of a trial.
//!
//! Clients buffer their events and send them in batches on their events
//! connection; the checking resource keeps them in arrival order per
//! client. A client killed at the end of a trial leaves its last
//! invocations without completions, which a checker treats as unknown.

use serde::{Deserialize, Serialize};

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Acquire the lock; `ok` carries the token.
    Acquire,
    /// Release it.
    Release,
    /// A write to the protected resource with the token; `fail` is a
    /// write the fenced view rejected as stale.
    Write,
    /// The lost signal fired (`info`).
    Lost,
}

/// Which half of an operation, or a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The operation began.
    Invoke,
    /// It completed and took effect.
    Ok,
    /// It completed and did not take effect.
    Fail,
    /// Its effect is unknown, or it is a notification.
    Info,
}

/// One history event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The client's number.
    pub client: u32,
    /// What was done.
    pub op: Op,
    /// Which half.
    pub outcome: Outcome,
    /// The fencing token, where one is known.
    pub token: Option<u64>,
    /// Nanoseconds since the trial's origin on the machine's monotonic
    /// clock.
    pub at_ns: u64,
}

/// A client's buffer of events not yet sent.
#[derive(Debug, Default)]
pub struct Recorder {
    origin_ns: u64,
    client: u32,
    pending: Vec<Event>,
}

impl Recorder {
    /// Records for `client`, with times relative to `origin_ns`
    /// ([`now_ns`](super::clock::now_ns) of the runner's choosing).
    pub fn new(client: u32, origin_ns: u64) -> Recorder {
        Recorder {
            origin_ns,
            client,
            pending: Vec::new(),
        }
    }

    /// Records `op`'s `outcome` at `at_ns` (absolute, as `now_ns`).
    pub fn record(&mut self, op: Op, outcome: Outcome, token: Option<u64>, at_ns: u64) {
        self.pending.push(Event {
            client: self.client,
            op,
            outcome,
            token,
            at_ns: at_ns.saturating_sub(self.origin_ns),
        });
    }

    /// The events recorded since the last call.
    pub fn take(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_relative_to_the_origin_and_taken_once() {
        let mut recorder = Recorder::new(3, 1_000);
        recorder.record(Op::Acquire, Outcome::Invoke, None, 1_500);
        recorder.record(Op::Acquire, Outcome::Ok, Some(7), 2_000);
        let events = recorder.take();
        assert_eq!(events.len(), 2);
        assert_eq!((events[0].at_ns, events[1].token), (500, Some(7)));
        assert!(recorder.take().is_empty());
        let text = serde_json::to_string(&events[1]).unwrap();
        assert_eq!(
            text,
            r#"{"client":3,"op":"acquire","outcome":"ok","token":7,"at_ns":1000}"#
        );
    }
}
