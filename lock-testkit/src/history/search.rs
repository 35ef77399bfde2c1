//! The depth-first search for a linearization of one name's calls.
//!
//! Calls and returns sit in one list in time order. A call may be placed
//! (linearized) next when it is in the list before the first return still
//! there; placing it steps the model and lifts its call and return out of
//! the list. Reaching a return whose call was not placed means the order
//! so far cannot be completed: the last placement is undone and the next
//! candidate after it is tried. A set of placed calls with a model state
//! already seen is never explored twice, which keeps the search from
//! repeating the same work under many orders.
//!
//! The candidates of a level are tried in phases ([`tried_in`]), so a good
//! history is usually placed with little backtracking.

use std::collections::HashSet;
use std::time::Instant;

use super::model::{Model, State};
use super::operation::{Nanos, Op};

/// One call as the search sees it.
#[derive(Debug, Clone)]
pub(crate) struct Call<'h> {
    /// The client that made it.
    pub(crate) process: u64,
    /// What it did.
    pub(crate) op: &'h Op,
    /// The earliest moment it can take effect.
    pub(crate) start: Nanos,
    /// Orders `start` among events at the same moment: 0 before returns
    /// (concurrent with them), 2 after them (a lost signal after its own grant).
    pub(crate) start_rank: u8,
    /// The latest moment it can take effect; `None` when it may take effect
    /// at any later moment, or never.
    pub(crate) end: Option<Nanos>,
    /// For an open-ended acquisition: the positions of its process's
    /// successful writes that its hold could be what allows. Once those are
    /// all placed, placing it could only restrict, and it is not tried.
    pub(crate) may_allow: Vec<usize>,
}

/// What one search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// An order exists.
    Fits,
    /// No order exists.
    DoesNotFit,
    /// The budget ran out first; says which limit.
    OutOfBudget(&'static str),
}

/// The steps and time left to a whole check.
#[derive(Debug)]
pub(crate) struct Budget {
    pub(crate) steps_left: u64,
    pub(crate) deadline: Instant,
    pub(crate) fencing: bool,
}

impl Budget {
    fn spend(&mut self) -> Result<(), &'static str> {
        if self.steps_left == 0 {
            return Err("step limit");
        }
        self.steps_left -= 1;
        if self.steps_left.is_multiple_of(4096) && Instant::now() >= self.deadline {
            self.steps_left = 0;
            return Err("time limit");
        }
        Ok(())
    }
}

const NIL: usize = usize::MAX;

/// The event list: node `2 * i` is call `i`'s start, `2 * i + 1` its end;
/// node `head` is the sentinel before the first event.
struct Events {
    /// Each node's place in time order, which lifting does not change.
    position: Vec<usize>,
    next: Vec<usize>,
    prev: Vec<usize>,
    head: usize,
}

impl Events {
    fn new(calls: &[Call<'_>]) -> Self {
        let mut order: Vec<usize> = (0..2 * calls.len()).collect();
        order.sort_by_key(|&node| {
            let call = &calls[node / 2];
            if node.is_multiple_of(2) {
                (call.start, call.start_rank, node)
            } else {
                match call.end {
                    Some(end) => (end, 1, node),
                    None => (Nanos::MAX, 3, node),
                }
            }
        });
        let head = 2 * calls.len();
        let mut next = vec![NIL; head + 1];
        let mut prev = vec![NIL; head + 1];
        let mut position = vec![0; head];
        let mut last = head;
        for (at, node) in order.into_iter().enumerate() {
            position[node] = at;
            next[last] = node;
            prev[node] = last;
            last = node;
        }
        Events {
            position,
            next,
            prev,
            head,
        }
    }

    /// The calls that may be placed next: those listed before the first
    /// end still listed.
    /// The time-order position of the first end still listed (one past
    /// the last node when none is).
    fn frontier(&self) -> usize {
        std::iter::successors(Some(self.next[self.head]), |&node| Some(self.next[node]))
            .find(|&node| node == NIL || node % 2 == 1)
            .map_or(self.position.len(), |node| {
                if node == NIL {
                    self.position.len()
                } else {
                    self.position[node]
                }
            })
    }

    fn candidates(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(self.next[self.head]), |&node| Some(self.next[node]))
            .take_while(|&node| node != NIL && node % 2 == 0)
            .map(|node| node / 2)
    }

    fn unlink(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = node;
        if n != NIL {
            self.prev[n] = node;
        }
    }

    fn lift(&mut self, call: usize) {
        self.unlink(2 * call);
        self.unlink(2 * call + 1);
    }

    fn unlift(&mut self, call: usize) {
        self.relink(2 * call + 1);
        self.relink(2 * call);
    }
}

/// The phase of a level's search in which `call` is a candidate.
///
/// A level tries the calls that must take effect first; then lost signals,
/// whose effect (ending a hold) is better late than early for their own
/// process's writes; and open-ended calls, which may also never take
/// effect, only once all else there failed. A good history is then placed
/// with little backtracking.
fn tried_in(call: &Call<'_>) -> u8 {
    match (call.end, call.op) {
        (None, _) => 2,
        (Some(_), Op::Lost { .. }) => 1,
        (Some(_), _) => 0,
    }
}

const LAST_PHASE: u8 = 2;

/// What the open-ended calls of one level are weighed against
/// ([`Level::worth_placing`]), worked out when first asked.
#[derive(Debug, Default)]
struct Level {
    /// Time-order position of the first end still listed: the calls
    /// listed before it are the candidates.
    frontier: Option<usize>,
    /// The processes whose holds keep a candidate acquisition from being
    /// granted in the current state.
    blocking: Option<Vec<u64>>,
}

impl Level {
    /// Whether placing the open-ended `call` now can be needed.
    ///
    /// Any order the model accepts can be rearranged so that each
    /// open-ended call that takes effect does so just before the first call
    /// that needs it, and the others never do: an acquisition just before a
    /// write of its process that its hold allows (moving a grant later only
    /// frees the lock for longer), a release or loss just before an
    /// acquisition that its process's hold blocks (moving it later only
    /// keeps the hold longer, and the process's own writes need the hold).
    /// So such a call is only tried when a call that could need it is a
    /// candidate too.
    fn worth_placing(
        &mut self,
        index: usize,
        search: &Search<'_, '_>,
        state: &State,
        placed: &[u64],
    ) -> bool {
        let call = &search.calls[index];
        match call.op {
            Op::Acquire { .. } => {
                let frontier = *self
                    .frontier
                    .get_or_insert_with(|| search.events.frontier());
                // `may_allow` is in time order; a write at or past the
                // frontier is not a candidate, nor any after it.
                search.may_allow[index]
                    .iter()
                    .take_while(|&&w| search.events.position[2 * w] < frontier)
                    .any(|&w| placed[w / 64] & (1 << (w % 64)) == 0)
            }
            Op::Release { .. } | Op::Lost { .. } => self
                .blocking
                .get_or_insert_with(|| search.blocking(state))
                .contains(&call.process),
            Op::Write { .. } => false,
        }
    }
}

/// What stays the same during one search.
struct Search<'c, 'h> {
    model: Model,
    calls: &'c [Call<'h>],
    events: Events,
    fencing: bool,
    /// Each call's `may_allow`, in time order.
    may_allow: Vec<Vec<usize>>,
}

impl Search<'_, '_> {
    /// The processes whose holds keep a candidate acquisition from being
    /// granted in `state`.
    fn blocking(&self, state: &State) -> Vec<u64> {
        let mut blocking = Vec::new();
        for next in self.events.candidates() {
            let c = &self.calls[next];
            if let Op::Acquire { mode, .. } = c.op
                && self
                    .model
                    .step(state, c.process, c.op, self.fencing)
                    .is_none()
            {
                blocking.extend(self.model.blocking(state, c.process, *mode));
            }
        }
        blocking
    }
}

/// Whether `calls` can be placed in one order that respects real time and
/// that `model`, starting from a free lock, accepts step by step. Calls
/// without an end need not be placed at all.
pub(crate) fn search(model: Model, calls: &[Call<'_>], budget: &mut Budget) -> Found {
    let events = Events::new(calls);
    let may_allow = calls
        .iter()
        .map(|c| {
            let mut writes = c.may_allow.clone();
            writes.sort_by_key(|&w| events.position[2 * w]);
            writes
        })
        .collect();
    let mut search = Search {
        model,
        calls,
        events,
        fencing: budget.fencing,
        may_allow,
    };
    let mut state = State::default();
    let mut placed = vec![0u64; calls.len().div_ceil(64)];
    let mut undo: Vec<(usize, State)> = Vec::new();
    let mut seen: HashSet<(Vec<u64>, State)> = HashSet::new();
    let mut unplaced = calls.iter().filter(|c| c.end.is_some()).count();
    let mut phase = 0;
    let mut level = Level::default();
    let mut node = search.events.next[search.events.head];
    loop {
        if unplaced == 0 {
            // Only open-ended calls are left, and they may never take effect.
            return Found::Fits;
        }
        // With a call that must take effect left, its end is still listed.
        let call = node / 2;
        if node.is_multiple_of(2) {
            let c = &calls[call];
            if tried_in(c) != phase {
                node = search.events.next[node];
                continue;
            }
            if c.end.is_none() && !level.worth_placing(call, &search, &state, &placed) {
                node = search.events.next[node];
                continue;
            }
            if let Err(limit) = budget.spend() {
                return Found::OutOfBudget(limit);
            }
            if let Some(next_state) = model.step(&state, c.process, c.op, budget.fencing) {
                let mut next_placed = placed.clone();
                next_placed[call / 64] |= 1 << (call % 64);
                if seen.insert((next_placed.clone(), next_state.clone())) {
                    undo.push((call, std::mem::replace(&mut state, next_state)));
                    placed = next_placed;
                    unplaced -= usize::from(c.end.is_some());
                    search.events.lift(call);
                    level = Level::default();
                    phase = 0;
                    node = search.events.next[search.events.head];
                    continue;
                }
            }
            node = search.events.next[node];
        } else if phase < LAST_PHASE {
            phase += 1;
            node = search.events.next[search.events.head];
        } else {
            let Some((last, before)) = undo.pop() else {
                return Found::DoesNotFit;
            };
            state = before;
            unplaced += usize::from(calls[last].end.is_some());
            placed[last / 64] &= !(1 << (last % 64));
            search.events.unlift(last);
            level = Level::default();
            phase = tried_in(&calls[last]);
            node = search.events.next[2 * last];
        }
    }
}
