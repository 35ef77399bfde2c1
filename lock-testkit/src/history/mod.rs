//! Histories of lock operations, and a checker that tells whether they are
//! linearizable against a mutex, a semaphore or a read-write lock.
//!
//! # What is recorded
//!
//! Each client process records an [`Operation`] per call: what it asked
//! ([`Op::Acquire`], [`Op::Release`], [`Op::Write`] to the protected
//! resource, or the [`Op::Lost`] signal it received), when the call started
//! and completed on a clock shared by every client, and whether it took
//! effect ([`Outcome::Ok`]), did not ([`Outcome::Fail`]), or nobody knows
//! ([`Outcome::Info`]: a timeout). Operations serialize with serde, so
//! clients in other processes can send them as JSON lines.
//!
//! # The model
//!
//! Every lock name is one primitive, fixed by the modes it is acquired in:
//! a [`Model::Mutex`] admits one holder, a [`Model::Semaphore`] up to its
//! permits, a [`Model::RwLock`] any number of readers or one writer. A
//! process holds a name at most once. In the model, each call takes effect
//! at one instant:
//!
//! - an `Ok` call at some instant between its invocation and completion,
//! - an `Info` call at some instant after its invocation, or never (the
//!   hold an unknown acquisition may give counts as its process's only
//!   until that process's next successful acquisition: a later grant of
//!   the abandoned request is a hold the process does not know of),
//! - a `Fail` call never;
//! - a `Lost` signal at some instant after the process's last grant of
//!   the name and no later than its delivery: the hold may have ended
//!   before the client heard of it, but not after.
//!
//! An acquisition takes effect only where the primitive admits it; a
//! release or a loss ends the process's hold; a write takes effect only
//! while its process holds the name (see [`Model`] for the exact rules,
//! and [`CheckOptions::fencing`] for token order).
//!
//! # What the checker proves
//!
//! [`check`] answers [`Verdict::Linearizable`] when, for every name, some
//! choice of instants puts all the calls in one order that respects real
//! time (a call that completed before another started comes first) and that
//! the model accepts step by step. Then no two clients ever held a mutex
//! at once, no semaphore had more holders than permits, no writer shared
//! a read-write lock, and no write landed outside its writer's hold, in
//! any execution consistent with what the clients saw.
//!
//! [`Verdict::NotLinearizable`] means no such order exists: the history
//! itself is a proof that the locks failed, and the explanation names the
//! shortest failing prefix and the calls around the first call that cannot
//! be placed. The search is exhaustive (a Wing and Gong style depth-first
//! search over linearization points, with backtracking, that never explores
//! the same set of placed calls with the same model state twice), so it is
//! exact, not a heuristic; a budget ([`CheckOptions`]) bounds it, and when
//! the budget runs out the answer is [`Verdict::Unknown`], never a guess.
//!
//! Names are independent (locks on different names do not interact), so the
//! history is split by name and each part is checked alone: a history is
//! linearizable exactly when each part is.

mod explain;
mod model;
mod operation;
mod search;
mod verdict;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Instant;

pub use model::Model;
pub use operation::{Mode, Nanos, Op, Operation, Outcome, nanos};
pub use verdict::{CheckOptions, Explanation, HistoryError, Verdict};

use search::{Budget, Call, Found};

/// Checks `history` name by name against each name's model.
///
/// The first name found not linearizable is the answer; a name whose
/// search ran out of budget makes the answer [`Verdict::Unknown`] unless
/// another name is found not linearizable.
///
/// # Errors
///
/// [`HistoryError`] when the history is malformed: a completion before its
/// invocation, or a name acquired as two different primitives.
pub fn check(history: &[Operation], options: &CheckOptions) -> Result<Verdict, HistoryError> {
    let parts = partition(history)?;
    let mut budget = Budget {
        steps_left: options.max_steps,
        deadline: Instant::now() + options.max_time,
        fencing: options.fencing,
    };
    let mut unknown = None;
    for (name, (model, ops)) in &parts {
        let calls = calls_of(ops);
        match search::search(*model, &calls, &mut budget) {
            Found::Fits => {}
            Found::DoesNotFit => {
                let explanation = explain::explain(*model, ops, &calls, &mut budget);
                return Ok(Verdict::NotLinearizable {
                    name: name.clone(),
                    explanation,
                });
            }
            Found::OutOfBudget(limit) => {
                unknown.get_or_insert_with(|| {
                    format!(
                        "the search on lock {name} ({} operations) reached its {limit}",
                        ops.len()
                    )
                });
            }
        }
    }
    Ok(match unknown {
        Some(reason) => Verdict::Unknown { reason },
        None => Verdict::Linearizable,
    })
}

/// The history split by name, each part with its model, in history order.
fn partition(
    history: &[Operation],
) -> Result<BTreeMap<String, (Model, Vec<&Operation>)>, HistoryError> {
    let mut parts: BTreeMap<String, (Option<Model>, Vec<&Operation>)> = BTreeMap::new();
    for op in history {
        if op.complete < op.invoke {
            return Err(HistoryError::CompleteBeforeInvoke(op.clone()));
        }
        let part = parts.entry(op.name().to_owned()).or_default();
        if let Op::Acquire { name, mode } = &op.op {
            if *mode == (Mode::Permit { limit: 0 }) {
                return Err(HistoryError::ZeroPermits(name.clone()));
            }
            let model = Model::of_mode(*mode);
            match part.0 {
                None => part.0 = Some(model),
                Some(first) if first != model => {
                    return Err(HistoryError::MixedPrimitives {
                        name: name.clone(),
                        first,
                        second: model,
                    });
                }
                Some(_) => {}
            }
        }
        part.1.push(op);
    }
    // A name never acquired can only hold writes and releases; any model
    // rejects its writes alike.
    Ok(parts
        .into_iter()
        .map(|(name, (model, ops))| (name, (model.unwrap_or(Model::Mutex), ops)))
        .collect())
}

/// The calls of one name as the search places them: unknown ones
/// open-ended, and each lost signal free to take effect from its process's
/// last grant on. Calls that no order needs are dropped ([`needed`]).
fn calls_of<'h>(ops: &[&'h Operation]) -> Vec<Call<'h>> {
    let kept: Vec<&Operation> = ops.iter().copied().filter(|op| needed(ops, op)).collect();
    kept.iter()
        .map(|op| {
            let (start, start_rank) = match op.op {
                Op::Lost { .. } => last_grant(ops, op).map_or((op.invoke, 0), |t| (t, 2)),
                _ => (op.invoke, 0),
            };
            Call {
                process: op.process,
                op: &op.op,
                start,
                start_rank,
                end: (op.outcome == Outcome::Ok).then_some(op.complete),
                may_allow: match (op.outcome, &op.op) {
                    (Outcome::Info, Op::Acquire { .. }) => kept
                        .iter()
                        .enumerate()
                        .filter(|(_, later)| allows_write(ops, op, later))
                        .map(|(i, _)| i)
                        .collect(),
                    _ => Vec::new(),
                },
            }
        })
        .collect()
}

/// Whether some order may need `op` to take effect.
///
/// A failed call took none. An unknown write only ever restricts: placing
/// it changes nothing, or raises the fencing token later writes must reach.
/// An unknown acquisition only restricts too (it takes the lock from
/// others and from its own later acquisitions), except that a successful
/// write of its process after it may need the hold it gives
/// ([`allows_write`]). Dropping
/// these from any order the model accepts leaves an order it accepts, so
/// the verdict is the same without them; the search is much shorter.
fn needed(ops: &[&Operation], op: &Operation) -> bool {
    match (op.outcome, &op.op) {
        (Outcome::Ok, _) => true,
        (Outcome::Fail, _) | (Outcome::Info, Op::Write { .. }) => false,
        (Outcome::Info, Op::Acquire { .. }) => ops.iter().any(|later| allows_write(ops, op, later)),
        (Outcome::Info, Op::Release { .. } | Op::Lost { .. }) => true,
    }
}

/// Whether the hold an unknown `acquire` may have given can be what
/// allows `write`: a successful write of the same process that may take
/// effect after it, with no successful acquisition of that process in
/// between (the write then belongs to that newer hold; a late grant of
/// the older request would be a hold its process does not know of).
fn allows_write(ops: &[&Operation], acquire: &Operation, write: &Operation) -> bool {
    let p = acquire.process;
    write.process == p
        && write.outcome == Outcome::Ok
        && matches!(write.op, Op::Write { .. })
        && write.complete >= acquire.invoke
        && !ops.iter().any(|newer| {
            newer.process == p
                && newer.outcome == Outcome::Ok
                && matches!(newer.op, Op::Acquire { .. })
                && newer.invoke > acquire.invoke
                && newer.complete <= write.invoke
        })
}

/// When `lost`'s process was last granted the name before the signal: the
/// completion of its last successful acquisition, or the invocation of an
/// unknown one, whichever is later.
fn last_grant(ops: &[&Operation], lost: &Operation) -> Option<Nanos> {
    ops.iter()
        .filter(|op| op.process == lost.process && matches!(op.op, Op::Acquire { .. }))
        .filter_map(|op| match op.outcome {
            Outcome::Ok => Some(op.complete),
            Outcome::Info => Some(op.invoke),
            Outcome::Fail => None,
        })
        .filter(|&granted| granted <= lost.invoke)
        .max()
}
