//! A second linearizability checker, written by nobody here: porcupine's
//! algorithm (Wing and Gong's search with Lowe's cache, per lock name) as
//! the `porcupine-rs` crate implements it, run on the same histories as
//! the project's own checker against two models written for the lock:
//!
//! - [`Exclusion`]: at most one holder of a name at any instant, and every
//!   successful write made by that holder;
//! - [`FencedRegister`]: grant tokens rise, and a write succeeds only with
//!   the highest token granted so far (a rejected one only below it).
//!
//! An unknown (`info`) call may take effect at any instant after its
//! invocation, or never: it is given no return, and [`Exclusion`] keeps
//! the set of states it may have left (porcupine's models are
//! deterministic, so the possible states are the model's state).

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_testkit::history::Outcome;
use porcupine_rs::{CheckResult, Model, Operation};
use serde::{Deserialize, Serialize};

use super::history::{Call, Op};

/// The checker and its version, as verdicts name it (the version in
/// `Cargo.lock`; a test keeps them equal).
pub const CHECKER: &str = "porcupine-rs 0.3.0";

/// How long the second checker may search one trial's history.
const CHECK_TIME: Duration = Duration::from_secs(3);

/// What the second checker answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Second {
    /// Both models (or exclusion alone, without fencing) fit.
    Linearizable,
    /// The named model fits no order of the calls.
    NotLinearizable {
        /// `exclusion` or `fenced register`.
        model: String,
    },
    /// The search ran out of time.
    Unknown,
}

impl std::fmt::Display for Second {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Second::Linearizable => write!(f, "{CHECKER}: linearizable"),
            Second::NotLinearizable { model } => {
                write!(f, "{CHECKER}: not linearizable against the {model} model")
            }
            Second::Unknown => write!(f, "{CHECKER}: undecided within {CHECK_TIME:?}"),
        }
    }
}

/// Checks `calls` against [`Exclusion`] and, with `fencing`, against
/// [`FencedRegister`].
pub fn check(calls: &[Call], fencing: bool) -> Second {
    let exclusion =
        porcupine_rs::check_operations_timeout::<Exclusion>(&exclusion_ops(calls), CHECK_TIME);
    let register = if fencing {
        porcupine_rs::check_operations_timeout::<FencedRegister>(&register_ops(calls), CHECK_TIME)
    } else {
        CheckResult::Ok
    };
    match (exclusion, register) {
        (CheckResult::Illegal, _) => Second::NotLinearizable {
            model: "exclusion".into(),
        },
        (_, CheckResult::Illegal) => Second::NotLinearizable {
            model: "fenced register".into(),
        },
        (CheckResult::Ok, CheckResult::Ok) => Second::Linearizable,
        _ => Second::Unknown,
    }
}

/// One call as the models step it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    client: u32,
    op: Op,
    name: String,
    token: u64,
    outcome: Outcome,
}

/// Times on porcupine's clock: doubled, so that a lost signal can start
/// strictly after its own grant returned (porcupine puts a call before a
/// return at the same instant).
fn at(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX / 4).saturating_mul(2)
}

fn operation<M: Model<Op = Step>>(call: &Call, start: i64, end: Option<i64>) -> Operation<M> {
    Operation {
        client_id: Some(call.client),
        call_time: start,
        // No return: an unknown call may take effect at any later moment.
        return_time: end.map_or(i64::MAX, |end| end.max(start)),
        op: Step {
            client: call.client,
            op: call.op,
            name: call.name.clone(),
            token: call.token.unwrap_or(0),
            outcome: call.outcome,
        },
        metadata: None,
    }
}

/// The calls [`Exclusion`] steps: every call that may have taken effect
/// (a failed one took none; an unknown write changes no holder). A lost
/// signal may take effect from just after its client's last grant of the
/// name up to its delivery.
fn exclusion_ops(calls: &[Call]) -> Vec<Operation<Exclusion>> {
    calls
        .iter()
        .filter(|c| match c.outcome {
            Outcome::Ok => true,
            Outcome::Fail => false,
            Outcome::Info => c.op != Op::Write,
        })
        .map(|c| {
            let start = match c.op {
                Op::Lost => last_grant(calls, c).map_or(at(c.invoke_ns), |t| t + 1),
                _ => at(c.invoke_ns),
            };
            let end = (c.outcome == Outcome::Ok).then(|| at(c.complete_ns));
            operation(c, start, end)
        })
        .collect()
}

/// When `lost`'s client was last granted the name before the signal, on
/// porcupine's clock: an acquisition's return, or an unknown one's call.
fn last_grant(calls: &[Call], lost: &Call) -> Option<i64> {
    calls
        .iter()
        .filter(|c| c.client == lost.client && c.name == lost.name && c.op == Op::Acquire)
        .filter_map(|c| match c.outcome {
            Outcome::Ok => Some(at(c.complete_ns)),
            Outcome::Info => Some(at(c.invoke_ns)),
            Outcome::Fail => None,
        })
        .filter(|&granted| granted <= at(lost.invoke_ns))
        .max()
}

/// The calls [`FencedRegister`] steps: grants, writes, and unknown grants
/// (which may have raised the highest token to one nobody saw).
fn register_ops(calls: &[Call]) -> Vec<Operation<FencedRegister>> {
    calls
        .iter()
        .filter(|c| match c.op {
            Op::Acquire => c.outcome != Outcome::Fail,
            Op::Write => c.outcome != Outcome::Info,
            Op::Release | Op::Lost => false,
        })
        .map(|c| {
            let end = (c.outcome != Outcome::Info).then(|| at(c.complete_ns));
            operation(c, at(c.invoke_ns), end)
        })
        .collect()
}

/// Splits operations by lock name: names are independent.
fn by_name<M: Model<Op = Step>>(history: &[Operation<M>]) -> Vec<Vec<Operation<M>>> {
    let mut parts: BTreeMap<&str, Vec<Operation<M>>> = BTreeMap::new();
    for op in history {
        parts.entry(&op.op.name).or_default().push(op.clone());
    }
    parts.into_values().collect()
}

/// Mutual exclusion over real time: who may hold the name. The state is
/// every holder (or `None`, free) the calls so far may have left.
#[derive(Debug, Clone, Copy)]
pub struct Exclusion;

impl Exclusion {
    /// The holder after `step` from `holder`, or `None` if it cannot happen.
    fn apply(holder: Option<u32>, step: &Step) -> Option<Option<u32>> {
        let mine = holder == Some(step.client);
        match step.op {
            Op::Acquire => holder.is_none().then_some(Some(step.client)),
            Op::Release | Op::Lost => Some(if mine { None } else { holder }),
            Op::Write => mine.then_some(holder),
        }
    }
}

impl Model for Exclusion {
    type State = Vec<Option<u32>>;
    type Op = Step;
    type Metadata = ();

    fn partition_operations(history: &[Operation<Self>]) -> Vec<Vec<Operation<Self>>> {
        by_name(history)
    }

    fn init() -> Self::State {
        vec![None]
    }

    fn step(state: &Self::State, step: &Step) -> (bool, Self::State) {
        let mut next: Vec<Option<u32>> = Vec::new();
        for &holder in state {
            if step.outcome == Outcome::Info {
                next.push(holder);
            }
            next.extend(Exclusion::apply(holder, step));
        }
        next.sort_unstable();
        next.dedup();
        (!next.is_empty(), next)
    }
}

/// A register that accepts a write only with the highest token granted so
/// far. `raised`: an unknown grant may have lifted the highest token above
/// `highest` to a value nobody saw.
#[derive(Debug, Clone, Copy)]
pub struct FencedRegister;

/// The highest token granted so far, and whether an unknown grant may have
/// raised it further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Highest {
    token: u64,
    raised: bool,
}

impl Model for FencedRegister {
    type State = Highest;
    type Op = Step;
    type Metadata = ();

    fn partition_operations(history: &[Operation<Self>]) -> Vec<Vec<Operation<Self>>> {
        by_name(history)
    }

    fn init() -> Highest {
        Highest::default()
    }

    fn step(state: &Highest, step: &Step) -> (bool, Highest) {
        let t = step.token;
        match (step.op, step.outcome) {
            (Op::Acquire, Outcome::Info) => (
                true,
                Highest {
                    raised: true,
                    ..*state
                },
            ),
            (Op::Acquire, _) => (
                t > state.token,
                Highest {
                    token: t,
                    raised: false,
                },
            ),
            // Accepted: the highest token, or the one an unknown grant gave.
            (Op::Write, Outcome::Ok) if t == state.token => (true, *state),
            (Op::Write, Outcome::Ok) => (
                state.raised && t > state.token,
                Highest {
                    token: t,
                    raised: false,
                },
            ),
            // Rejected: only a token below the highest, or below one unseen.
            (Op::Write, _) => (t < state.token || state.raised, *state),
            (Op::Release | Op::Lost, _) => (true, *state),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A call of `client` on the lock `l`, for tests.
    pub(crate) fn call(
        client: u32,
        op: Op,
        token: u64,
        span: (u64, u64),
        outcome: Outcome,
    ) -> Call {
        Call {
            client,
            op,
            name: "l".into(),
            token: Some(token),
            invoke_ns: span.0,
            complete_ns: span.1,
            outcome,
        }
    }

    /// Client 0 holds token 1 and writes; client 1 is granted token 2 and
    /// writes; then client 0 writes again with token 1 (accepted).
    fn stale_writer() -> Vec<Call> {
        use Op::*;
        use Outcome::Ok;
        vec![
            call(0, Acquire, 1, (0, 10), Ok),
            call(0, Write, 1, (20, 30), Ok),
            call(0, Lost, 1, (40, 40), Ok),
            call(1, Acquire, 2, (50, 60), Ok),
            call(1, Write, 2, (70, 80), Ok),
            call(0, Write, 1, (90, 100), Ok),
        ]
    }

    #[test]
    fn a_write_after_the_loss_and_another_grant_fits_neither_model() {
        let calls = stale_writer();
        assert!(matches!(
            check(&calls, false),
            Second::NotLinearizable { .. }
        ));
        let fenced_only: Vec<Call> = calls.iter().filter(|c| c.op != Op::Lost).cloned().collect();
        // Without the loss, exclusion fails on the second grant already.
        assert_eq!(
            check(&fenced_only, true),
            Second::NotLinearizable {
                model: "exclusion".into()
            }
        );
        // The stale write rejected: both models fit.
        let mut rejected = calls;
        rejected[5].outcome = Outcome::Fail;
        assert_eq!(check(&rejected, true), Second::Linearizable);
    }

    #[test]
    fn an_unknown_release_may_have_freed_the_lock_or_not() {
        use Op::*;
        use Outcome::{Info, Ok};
        let calls = vec![
            call(0, Acquire, 1, (0, 10), Ok),
            call(0, Release, 1, (20, 30), Info),
            call(1, Acquire, 2, (40, 50), Ok),
            call(1, Write, 2, (60, 70), Ok),
        ];
        assert_eq!(check(&calls, true), Second::Linearizable);
        // A write of client 0 after client 1's grant cannot be placed.
        let mut late = calls;
        late.push(call(0, Write, 1, (80, 90), Ok));
        assert!(matches!(
            check(&late, false),
            Second::NotLinearizable { .. }
        ));
    }

    #[test]
    fn tokens_must_rise_and_writes_carry_the_highest() {
        use Op::*;
        use Outcome::Ok;
        let calls = vec![
            call(0, Acquire, 5, (0, 10), Ok),
            call(0, Release, 5, (20, 30), Ok),
            call(1, Acquire, 4, (40, 50), Ok),
        ];
        assert_eq!(check(&calls, false), Second::Linearizable);
        assert_eq!(
            check(&calls, true),
            Second::NotLinearizable {
                model: "fenced register".into()
            }
        );
    }

    #[test]
    fn the_named_version_is_the_one_locked() {
        let lock = include_str!("../../Cargo.lock");
        let locked = lock
            .split("[[package]]")
            .find(|p| p.contains("name = \"porcupine-rs\""))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
            .map(|v| v.trim_matches('"'));
        assert_eq!(Some(CHECKER.trim_start_matches("porcupine-rs ")), locked);
    }
}
