//! What a check answers, and what it is told.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::model::Model;
use super::operation::{Millis, Nanos, Operation};

/// How far a check may search before it answers [`Verdict::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Model steps tried, summed over every name and over the search for
    /// the smallest offending window.
    pub max_steps: u64,
    /// Wall-clock time for the whole check.
    pub max_time: Duration,
    /// Also require the writes made under exclusive holds of a name to carry
    /// non-decreasing fencing tokens. Off by default: a backend whose
    /// fencing is best effort may let tokens go back after a failover.
    pub fencing: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_steps: 20_000_000,
            max_time: Duration::from_secs(20),
            fencing: false,
        }
    }
}

/// The answer of [`check`](super::check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every name's operations fit its model in an order that respects real time.
    Linearizable,
    /// The operations on `name` fit its model in no order that respects real time.
    NotLinearizable {
        /// The lock.
        name: String,
        /// Where it goes wrong.
        explanation: Explanation,
    },
    /// The search ran out of its budget before it could tell.
    Unknown {
        /// Which name, and which limit.
        reason: String,
    },
}

/// Where a name's history stops fitting its model.
///
/// The history up to `prefix_end` (every call completed by then, with the
/// calls still running at that moment counted as unknown) is the shortest
/// prefix that is not linearizable: the completion of `culprit` is the first
/// moment no order works. `window` is `culprit` with every call overlapping
/// it and each process's last call before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// The model the name was checked against.
    pub model: Model,
    /// The end of the shortest non-linearizable prefix.
    pub prefix_end: Nanos,
    /// The call whose completion at `prefix_end` no order can fit.
    pub culprit: Operation,
    /// The calls around `culprit`, in invocation order.
    pub window: Vec<Operation>,
    /// Whether `window` alone, from a free lock, already fits no order;
    /// otherwise it fits none only after the calls before it.
    pub window_alone_fails: bool,
}

/// A history that cannot be checked as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// A completed call's completion is before its invocation.
    #[error("operation completes before it is invoked: {0}")]
    CompleteBeforeInvoke(Operation),
    /// One name is acquired as two different primitives (a history names
    /// a mutex and a semaphore of the same name differently).
    #[error("lock {name} is acquired both as a {first} and as a {second}")]
    MixedPrimitives {
        /// The lock.
        name: String,
        /// The primitive its first acquisition is on.
        first: Model,
        /// The other one.
        second: Model,
    },
    /// A semaphore with no permits.
    #[error("semaphore {0} is acquired with a limit of 0 permits")]
    ZeroPermits(String),
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "as a {}, no order of the calls up to {} fits: {} cannot be placed",
            self.model,
            Millis(self.prefix_end),
            self.culprit
        )?;
        if self.window_alone_fails {
            f.write_str(" among these calls alone:")?;
        } else {
            f.write_str(" after the earlier calls, around these:")?;
        }
        for op in &self.window {
            write!(f, "\n  {op}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => f.write_str("linearizable"),
            Verdict::NotLinearizable { name, explanation } => {
                write!(f, "lock {name} is not linearizable: {explanation}")
            }
            Verdict::Unknown { reason } => write!(f, "unknown: {reason}"),
        }
    }
}
