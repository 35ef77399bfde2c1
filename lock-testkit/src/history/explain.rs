//! The shortest failing prefix of a name's history, and the calls around it.

use std::collections::HashMap;

use super::model::Model;
use super::operation::{Nanos, Operation};
use super::search::{self, Budget, Call, Found};
use super::verdict::Explanation;

/// Explains why `calls` (the searchable form of `ops`, which is known not
/// to fit `model`) fits no order.
///
/// A prefix ending at `t` keeps the calls that started by `t`, with those
/// still running at `t` open-ended, as if the history had been cut there.
/// Cutting a linearizable history leaves a linearizable one, so whether a
/// prefix fits is monotone in `t`, and a binary search over completion
/// times finds the shortest one that does not.
pub(super) fn explain(
    model: Model,
    ops: &[&Operation],
    calls: &[Call<'_>],
    budget: &mut Budget,
) -> Explanation {
    // `calls` and the needed `ops` correspond one to one.
    let originals: Vec<&Operation> = ops
        .iter()
        .copied()
        .filter(|op| super::needed(ops, op))
        .collect();
    let mut ends: Vec<Nanos> = calls.iter().filter_map(|c| c.end).collect();
    ends.sort_unstable();
    ends.dedup();

    // The last end always fails: that prefix is the whole history.
    let (mut low, mut high) = (0, ends.len().saturating_sub(1));
    while low < high {
        let mid = low + (high - low) / 2;
        match search::search(model, &prefix(calls, ends[mid]), budget) {
            Found::DoesNotFit => high = mid,
            Found::Fits => low = mid + 1,
            // Out of budget: settle for the longer prefix, still a failing one.
            Found::OutOfBudget(_) => break,
        }
    }
    let prefix_end = ends.get(high).copied().unwrap_or(0);
    let cut = prefix(calls, prefix_end);
    let culprit = (0..calls.len())
        .find(|&i| calls[i].end == Some(prefix_end))
        .unwrap_or(0);

    let window = window_around(&cut, culprit);
    let window_calls = restrict(&cut, &window);
    let window_alone_fails = search::search(model, &window_calls, budget) == Found::DoesNotFit;

    let mut window: Vec<Operation> = window.iter().map(|&i| originals[i].clone()).collect();
    window.sort_by_key(|op| (op.invoke, op.complete));
    Explanation {
        model,
        prefix_end,
        culprit: originals[culprit].clone(),
        window,
        window_alone_fails,
    }
}

/// `calls` cut at `t`: the calls started by then, those still running
/// open-ended. Positions are kept (calls started later become open-ended
/// calls that start at the end of time, and need never be placed).
fn prefix<'h>(calls: &[Call<'h>], t: Nanos) -> Vec<Call<'h>> {
    calls
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c.start > t {
                c.start = Nanos::MAX;
                c.end = None;
            } else if c.end.is_some_and(|end| end > t) {
                c.end = None;
            }
            c
        })
        .collect()
}

/// The calls of `cut` at `positions` alone, their references to each other
/// renumbered.
fn restrict<'h>(cut: &[Call<'h>], positions: &[usize]) -> Vec<Call<'h>> {
    let renumbered: HashMap<usize, usize> = positions
        .iter()
        .enumerate()
        .map(|(new, &old)| (old, new))
        .collect();
    positions
        .iter()
        .map(|&i| {
            let mut call = cut[i].clone();
            call.may_allow = call
                .may_allow
                .iter()
                .filter_map(|old| renumbered.get(old).copied())
                .collect();
            call
        })
        .collect()
}

/// The positions of `culprit`, every started call overlapping it, and each
/// process's last call that ended before it began.
fn window_around(cut: &[Call<'_>], culprit: usize) -> Vec<usize> {
    let begin = cut[culprit].start;
    let mut last_before: HashMap<u64, (Nanos, usize)> = HashMap::new();
    let mut window = Vec::new();
    for (i, c) in cut.iter().enumerate() {
        if c.start == Nanos::MAX {
            continue;
        }
        match c.end {
            Some(end) if end < begin => {
                let last = last_before.entry(c.process).or_insert((end, i));
                if end >= last.0 {
                    *last = (end, i);
                }
            }
            _ => window.push(i),
        }
    }
    window.extend(last_before.into_values().map(|(_, i)| i));
    window.sort_unstable();
    window
}
