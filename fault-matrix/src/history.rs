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

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_testkit::history::{self as checker, CheckOptions, Mode, Operation, Verdict};
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The lock name, when the client holds several (else the trial's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
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

    /// Records `op`'s `outcome` at `at_ns` (absolute, as `now_ns`) on
    /// lock `name` (empty: the trial's one lock).
    pub fn record(&mut self, op: Op, outcome: Outcome, token: Option<u64>, at_ns: u64, name: &str) {
        self.pending.push(Event {
            client: self.client,
            op,
            outcome,
            token,
            at_ns: at_ns.saturating_sub(self.origin_ns),
            name: name.to_owned(),
        });
    }

    /// `at_ns` (absolute, as `now_ns`) relative to the origin.
    pub fn since_origin(&self, at_ns: u64) -> u64 {
        at_ns.saturating_sub(self.origin_ns)
    }

    /// The events recorded since the last call.
    pub fn take(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.pending)
    }
}

/// One call of a trial's history, as the history files show it: who made
/// it, on which lock, with which token (granted by an acquisition, carried
/// by a write, the hold's for a release or a lost signal), when it was
/// invoked and completed (ns since the trial's origin), and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// The client's number.
    pub client: u32,
    /// What was done.
    pub op: Op,
    /// The lock name.
    pub name: String,
    /// The fencing token, where one is known.
    pub token: Option<u64>,
    /// When the call began (a lost signal: when it was delivered).
    pub invoke_ns: u64,
    /// When its outcome was known (for `info`, when the client gave up).
    pub complete_ns: u64,
    /// `ok`, `fail` (a write the fenced view rejected) or `info` (unknown).
    pub outcome: checker::Outcome,
}

impl Call {
    /// This call as the project's checker takes it, acquired in `mode`.
    pub fn operation(&self, mode: Mode) -> Operation {
        let name = self.name.clone();
        let op = match self.op {
            Op::Acquire => checker::Op::Acquire { name, mode },
            Op::Release => checker::Op::Release { name },
            Op::Lost => checker::Op::Lost { name },
            Op::Write => checker::Op::Write {
                name,
                token: self.token.unwrap_or(0),
            },
        };
        Operation {
            process: u64::from(self.client),
            op,
            invoke: self.invoke_ns,
            complete: self.complete_ns,
            outcome: self.outcome,
        }
    }
}

/// A trial's history as the checker takes it: [`calls`] in `mode`.
pub fn operations(
    events: &[Event],
    name: &str,
    mode: Mode,
    end_ns: u64,
    dead: Option<u32>,
) -> Vec<Operation> {
    calls(events, name, end_ns, dead)
        .iter()
        .map(|c| c.operation(mode))
        .collect()
}

/// A trial's history: each client's invocations paired with their
/// completions, each on its event's lock name (`name` where the event
/// names none).
///
/// The history is cut at `end_ns`, the earliest moment up to which every
/// client's history had arrived (a client killed with the trial leaves its
/// last batch unsent): later events are dropped, and a call still open
/// then is unknown (`info`). A failed release is unknown too: the hold it meant to
/// end may have ended already. A lost signal counts only for the hold it
/// was about (the client's latest grant of that name). A client the runner
/// killed on purpose (`dead`) gets a lost signal at `end_ns` on every name
/// it used: its holds ended somewhere before, when their leases ran out.
pub fn calls(events: &[Event], name: &str, end_ns: u64, dead: Option<u32>) -> Vec<Call> {
    let mut by_client: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
    for event in events.iter().filter(|e| e.at_ns <= end_ns) {
        by_client.entry(event.client).or_default().push(event);
    }
    let name_of = |event: &Event| -> String {
        if event.name.is_empty() {
            name.to_owned()
        } else {
            event.name.clone()
        }
    };
    let call = |client, open: &Event, complete_ns: u64, token, outcome| Call {
        client,
        op: open.op,
        name: name_of(open),
        token,
        invoke_ns: open.at_ns,
        complete_ns: complete_ns.max(open.at_ns),
        outcome,
    };
    let mut out = Vec::new();
    for (client, events) in by_client {
        let mut pending: Option<&Event> = None;
        let mut granted: BTreeMap<String, u64> = BTreeMap::new();
        let mut used: Vec<String> = Vec::new();
        for event in events {
            if !used.contains(&name_of(event)) {
                used.push(name_of(event));
            }
            match (event.op, event.outcome) {
                (_, Outcome::Invoke) => {
                    if let Some(open) = pending.replace(event) {
                        let info = checker::Outcome::Info;
                        out.push(call(client, open, event.at_ns, open.token, info));
                    }
                }
                (Op::Lost, _) => {
                    if event.token.is_some() && event.token == granted.get(&name_of(event)).copied()
                    {
                        let ok = checker::Outcome::Ok;
                        out.push(call(client, event, event.at_ns, event.token, ok));
                    }
                }
                (op, outcome) => {
                    let Some(open) = pending.take_if(|open| open.op == op) else {
                        continue;
                    };
                    let outcome = match (op, outcome) {
                        (_, Outcome::Ok) => checker::Outcome::Ok,
                        (Op::Write, Outcome::Fail) => checker::Outcome::Fail,
                        _ => checker::Outcome::Info,
                    };
                    if op == Op::Acquire
                        && outcome == checker::Outcome::Ok
                        && let Some(token) = event.token
                    {
                        granted.insert(name_of(event), token);
                    }
                    if op == Op::Release {
                        granted.remove(&name_of(event));
                    }
                    let token = event.token.or(open.token);
                    out.push(call(client, open, event.at_ns, token, outcome));
                }
            }
        }
        if let Some(open) = pending {
            out.push(call(
                client,
                open,
                end_ns,
                open.token,
                checker::Outcome::Info,
            ));
        }
        if dead == Some(client) {
            for name in used {
                out.push(Call {
                    client,
                    op: Op::Lost,
                    name,
                    token: None,
                    invoke_ns: end_ns,
                    complete_ns: end_ns,
                    outcome: checker::Outcome::Ok,
                });
            }
        }
    }
    out.sort_by_key(|c| (c.invoke_ns, c.complete_ns));
    out
}

/// How long the checker may search one trial's history.
const CHECK_TIME: Duration = Duration::from_secs(3);

/// Checks a trial's history; `fencing` also requires the writes of
/// exclusive holds to carry non-decreasing tokens.
pub fn check(ops: &[Operation], fencing: bool) -> Verdict {
    let options = CheckOptions {
        max_steps: 5_000_000,
        max_time: CHECK_TIME,
        fencing,
    };
    checker::check(ops, &options).unwrap_or_else(|e| Verdict::Unknown {
        reason: format!("malformed history: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(client: u32, op: Op, outcome: Outcome, token: Option<u64>, at_ns: u64) -> Event {
        Event {
            client,
            op,
            outcome,
            token,
            at_ns,
            name: String::new(),
        }
    }

    #[test]
    fn two_clients_writing_under_one_mutex_at_once_is_not_linearizable() {
        use Op::*;
        use Outcome::*;
        let mut events = Vec::new();
        for (client, token, at) in [(0, 1, 0), (1, 2, 100)] {
            events.push(event(client, Acquire, Invoke, None, at));
            events.push(event(client, Acquire, Ok, Some(token), at + 10));
        }
        for (client, token, at) in [(0, 1, 200), (1, 2, 300)] {
            events.push(event(client, Write, Invoke, Some(token), at));
            events.push(event(client, Write, Ok, Some(token), at + 10));
        }
        events.sort_by_key(|e| e.at_ns);
        let ops = operations(&events, "l", Mode::Exclusive, 1_000, None);
        assert!(matches!(
            check(&ops, false),
            Verdict::NotLinearizable { .. }
        ));
        // The first holder's loss, heard before the second grant, makes it fit.
        events.push(event(0, Lost, Info, Some(1), 50));
        events.retain(|e| !(e.client == 0 && e.op == Write));
        events.sort_by_key(|e| e.at_ns);
        let ops = operations(&events, "l", Mode::Exclusive, 1_000, None);
        assert_eq!(check(&ops, true), Verdict::Linearizable);
    }

    #[test]
    fn events_are_relative_to_the_origin_and_taken_once() {
        let mut recorder = Recorder::new(3, 1_000);
        recorder.record(Op::Acquire, Outcome::Invoke, None, 1_500, "");
        recorder.record(Op::Acquire, Outcome::Ok, Some(7), 2_000, "");
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
