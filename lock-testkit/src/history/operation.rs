//! What a client records: one [`Operation`] per call it made on a lock.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Nanoseconds since an origin that every client of one history shares
/// (the harness's start, on a monotonic clock).
pub type Nanos = u64;

/// One call a client process made, with when it started, when its outcome
/// was known, and what that outcome was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The client that made the call. A client makes its calls on one name
    /// one at a time, except that a [`Op::Lost`] signal may arrive at any time.
    pub process: u64,
    /// What was asked.
    pub op: Op,
    /// When the call started, in [`Nanos`] since the shared origin.
    pub invoke: Nanos,
    /// When the outcome was known, in [`Nanos`] since the shared origin.
    /// For an [`Outcome::Info`] call this is only when the client gave up
    /// waiting: the call may still take effect later.
    pub complete: Nanos,
    /// Whether the call took effect.
    pub outcome: Outcome,
}

/// The kinds of calls a history records. Every kind names the lock it is on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// Take the lock `name` in `mode`.
    Acquire {
        /// The lock.
        name: String,
        /// How it is taken; fixes which model the name is checked against.
        mode: Mode,
    },
    /// Give back the hold on `name`.
    Release {
        /// The lock.
        name: String,
    },
    /// The lost-lock signal: the client learned that it no longer holds
    /// `name`. Its hold may have ended at any time since it was granted;
    /// `complete` is when the signal was delivered, the latest moment the
    /// hold can have lasted until.
    Lost {
        /// The lock.
        name: String,
    },
    /// A write to the resource `name` protects, made while the client
    /// believed it held `name`, carrying its fencing token.
    Write {
        /// The lock.
        name: String,
        /// The fencing token the write carried.
        token: u64,
    },
}

/// How an [`Op::Acquire`] takes its lock; also which primitive the name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The only holder of a mutex.
    Exclusive,
    /// One of any number of readers of a read-write lock.
    Read,
    /// The only writer of a read-write lock.
    Write,
    /// One permit of a semaphore that has `limit` permits.
    Permit {
        /// How many holders the semaphore admits at once.
        limit: u32,
    },
}

/// What the client learned about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It took effect, at some moment between `invoke` and `complete`.
    Ok,
    /// It did not take effect.
    Fail,
    /// Unknown (a timeout, a broken connection): it may have taken effect at
    /// any moment after `invoke`, or never.
    Info,
}

impl Op {
    /// The lock this call is on.
    pub fn name(&self) -> &str {
        match self {
            Op::Acquire { name, .. }
            | Op::Release { name }
            | Op::Lost { name }
            | Op::Write { name, .. } => name,
        }
    }
}

impl Mode {
    /// The mode of an acquisition through distlock-core's shared primitives.
    /// `None` for access kinds this history does not know.
    pub fn of_access(access: distlock_core::Access) -> Option<Mode> {
        match access {
            distlock_core::Access::Permit(limit) => Some(Mode::Permit { limit: limit.get() }),
            distlock_core::Access::Read => Some(Mode::Read),
            distlock_core::Access::Write => Some(Mode::Write),
            _ => None,
        }
    }

    /// Whether a holder in this mode is the only holder (so its writes must
    /// carry non-decreasing fencing tokens).
    pub fn is_exclusive(self) -> bool {
        matches!(self, Mode::Exclusive | Mode::Write)
    }
}

impl Operation {
    /// An operation whose times are given as offsets from the shared origin.
    pub fn new(
        process: u64,
        op: Op,
        invoke: Duration,
        complete: Duration,
        outcome: Outcome,
    ) -> Self {
        Operation {
            process,
            op,
            invoke: nanos(invoke),
            complete: nanos(complete),
            outcome,
        }
    }

    /// The lock this operation is on.
    pub fn name(&self) -> &str {
        self.op.name()
    }
}

/// `d` in [`Nanos`], saturating (a history spanning 584 years is not one).
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Exclusive => f.write_str("exclusive"),
            Mode::Read => f.write_str("read"),
            Mode::Write => f.write_str("write"),
            Mode::Permit { limit } => write!(f, "permit of {limit}"),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Acquire { name, mode } => write!(f, "acquire {name} ({mode})"),
            Op::Release { name } => write!(f, "release {name}"),
            Op::Lost { name } => write!(f, "lost {name}"),
            Op::Write { name, token } => write!(f, "write {name} with token {token}"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        })
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} {} -> {} [{}, {}]",
            self.process,
            self.op,
            self.outcome,
            Millis(self.invoke),
            Millis(self.complete)
        )
    }
}

/// [`Nanos`] shown as milliseconds with microsecond precision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Millis(pub(crate) Nanos);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:03}ms",
            self.0 / 1_000_000,
            self.0 % 1_000_000 / 1_000
        )
    }
}
