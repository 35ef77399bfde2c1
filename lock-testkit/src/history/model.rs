//! The sequential specifications a name's operations are checked against.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::operation::{Mode, Op};

/// Which primitive a lock name is, fixed by the modes its acquisitions use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// One holder at a time ([`Mode::Exclusive`]).
    Mutex,
    /// Up to `permits` holders at a time ([`Mode::Permit`]).
    Semaphore {
        /// How many holders it admits at once.
        permits: u32,
    },
    /// Any number of readers, or one writer ([`Mode::Read`], [`Mode::Write`]).
    RwLock,
}

/// The model's state for one name: who holds it, and the highest fencing
/// token an exclusive holder has written with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct State {
    /// `(process, mode)`, sorted by process; a process holds a name at most once.
    holders: Vec<(u64, Mode)>,
    /// The highest token written under an exclusive hold, when fencing is checked.
    fence: Option<u64>,
}

impl Model {
    /// The primitive that acquisitions in `mode` are on.
    pub fn of_mode(mode: Mode) -> Model {
        match mode {
            Mode::Exclusive => Model::Mutex,
            Mode::Read | Mode::Write => Model::RwLock,
            Mode::Permit { limit } => Model::Semaphore { permits: limit },
        }
    }

    /// The state after `process` does `op` in `state`, or `None` when the
    /// model forbids it there.
    ///
    /// - An acquisition needs the process not to hold the name already, and
    ///   the primitive to admit it: a mutex or a writer needs no holder, a
    ///   reader no writer, a permit fewer than `permits` holders.
    /// - A release or a lost signal ends the process's hold; without a hold
    ///   it changes nothing (a release after a loss may still answer ok).
    /// - A write needs the process to hold the name. With `fencing`, a write
    ///   under an exclusive hold also needs a token no lower than any earlier
    ///   such write's, as a fenced resource would.
    pub(crate) fn step(self, state: &State, process: u64, op: &Op, fencing: bool) -> Option<State> {
        let held = state.holders.binary_search_by_key(&process, |&(p, _)| p);
        match op {
            Op::Acquire { mode, .. } => {
                let Err(at) = held else { return None };
                if !self.admits(&state.holders, *mode) {
                    return None;
                }
                let mut next = state.clone();
                next.holders.insert(at, (process, *mode));
                Some(next)
            }
            Op::Release { .. } | Op::Lost { .. } => {
                let mut next = state.clone();
                if let Ok(at) = held {
                    next.holders.remove(at);
                }
                Some(next)
            }
            Op::Write { token, .. } => {
                let Ok(at) = held else { return None };
                let mode = state.holders[at].1;
                if !(fencing && mode.is_exclusive()) {
                    return Some(state.clone());
                }
                if state.fence.is_some_and(|fence| *token < fence) {
                    return None;
                }
                let mut next = state.clone();
                next.fence = Some(*token);
                Some(next)
            }
        }
    }

    /// The processes whose holds keep `process` from acquiring in `mode`
    /// in `state`: itself if it holds already, else every holder when it
    /// needs the lock alone or a permit, and the writers when it reads.
    pub(crate) fn blocking(self, state: &State, process: u64, mode: Mode) -> Vec<u64> {
        if state.holders.iter().any(|&(p, _)| p == process) {
            return vec![process];
        }
        state
            .holders
            .iter()
            .filter(|&&(_, held)| mode != Mode::Read || held != Mode::Read)
            .map(|&(p, _)| p)
            .collect()
    }

    fn admits(self, holders: &[(u64, Mode)], mode: Mode) -> bool {
        match (self, mode) {
            (Model::Mutex, Mode::Exclusive) | (Model::RwLock, Mode::Write) => holders.is_empty(),
            (Model::RwLock, Mode::Read) => holders.iter().all(|&(_, m)| m == Mode::Read),
            (Model::Semaphore { permits }, Mode::Permit { .. }) => {
                holders.len() < usize::try_from(permits).unwrap_or(usize::MAX)
            }
            // Mixed primitives on one name are rejected before the search.
            _ => false,
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Model::Mutex => f.write_str("mutex"),
            Model::Semaphore { permits } => write!(f, "semaphore of {permits} permits"),
            Model::RwLock => f.write_str("read-write lock"),
        }
    }
}
