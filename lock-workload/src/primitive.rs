//! Which primitive the workload's clients contend on, and the online check
//! of what it promises: a lock or a writer alone, at most `permits` permit
//! holders, readers never beside a writer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use distlock_core::Access;
use serde::Serialize;

/// The primitive under load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Primitive {
    /// The mutex: [`LockBackend::acquire`](distlock_core::LockBackend::acquire).
    #[default]
    Lock,
    /// A semaphore with this many permits.
    Semaphore {
        /// The semaphore's limit.
        permits: u32,
    },
    /// A read-write lock; this share of the acquisitions read.
    RwLock {
        /// Between 0 and 1.
        read_ratio: f64,
    },
}

impl Primitive {
    /// `lock`, `semaphore` or `rwlock`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Semaphore { .. } => "semaphore",
            Primitive::RwLock { .. } => "rwlock",
        }
    }

    /// What a client's `nth` acquisition asks for: `None` for the mutex.
    /// Reads are spread evenly, so every client reads the same share.
    pub(crate) fn access(&self, nth: u64) -> distlock_core::Result<Option<Access>> {
        Ok(match *self {
            Primitive::Lock => None,
            Primitive::Semaphore { permits } => Some(Access::permit(permits)?),
            Primitive::RwLock { read_ratio } => {
                let reads_before = (nth as f64 * read_ratio).floor();
                let reads_after = ((nth + 1) as f64 * read_ratio).floor();
                Some(if reads_after > reads_before {
                    Access::Read
                } else {
                    Access::Write
                })
            }
        })
    }
}

/// Who is inside one name right now, and the newest exclusive token.
#[derive(Debug, Default)]
pub(crate) struct Occupancy {
    exclusive: AtomicUsize,
    readers: AtomicUsize,
    permits: AtomicUsize,
    last_token: AtomicU64,
}

/// What entering found wrong.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Entry {
    /// Someone was inside who must not have been.
    pub(crate) violation: bool,
    /// An exclusive grant's token was not above every earlier grant's.
    pub(crate) regression: bool,
}

impl Occupancy {
    /// Records a grant of `access` (`None`: the mutex) with `token`.
    pub(crate) fn enter(&self, access: Option<Access>, token: u64) -> Entry {
        // Stored as token + 1 so that a first token of 0 is not a regression.
        let token = token.saturating_add(1);
        let newest = self.last_token.fetch_max(token, Ordering::SeqCst);
        match access {
            None | Some(Access::Write) => {
                let others = self.exclusive.fetch_add(1, Ordering::SeqCst)
                    + self.readers.load(Ordering::SeqCst);
                Entry {
                    violation: others > 0,
                    regression: newest >= token,
                }
            }
            Some(Access::Read) => {
                self.readers.fetch_add(1, Ordering::SeqCst);
                Entry {
                    violation: self.exclusive.load(Ordering::SeqCst) > 0,
                    regression: false,
                }
            }
            Some(Access::Permit(limit)) => {
                let before = self.permits.fetch_add(1, Ordering::SeqCst);
                Entry {
                    violation: before >= limit.get() as usize,
                    regression: false,
                }
            }
            Some(_) => Entry::default(),
        }
    }

    /// Records that the grant of `access` is leaving.
    pub(crate) fn leave(&self, access: Option<Access>) {
        let count = match access {
            None | Some(Access::Write) => &self.exclusive,
            Some(Access::Read) => &self.readers,
            Some(Access::Permit(_)) => &self.permits,
            Some(_) => return,
        };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_ratio_is_kept_exactly_over_any_ten_acquisitions() {
        let rw = Primitive::RwLock { read_ratio: 0.7 };
        let reads = (0..10)
            .filter(|n| rw.access(*n).unwrap() == Some(Access::Read))
            .count();
        assert_eq!(reads, 7);
    }

    #[test]
    fn a_permit_beyond_the_limit_is_a_violation() {
        let room = Occupancy::default();
        let permit = Some(Access::permit(2).unwrap());
        assert!(!room.enter(permit, 1).violation);
        assert!(!room.enter(permit, 2).violation);
        assert!(room.enter(permit, 3).violation);
    }

    #[test]
    fn a_writer_beside_a_reader_is_a_violation() {
        let room = Occupancy::default();
        assert!(!room.enter(Some(Access::Read), 1).violation);
        assert!(room.enter(Some(Access::Write), 2).violation);
    }

    #[test]
    fn an_exclusive_token_below_an_earlier_grant_is_a_regression() {
        let room = Occupancy::default();
        room.enter(Some(Access::Read), 5);
        room.leave(Some(Access::Read));
        assert!(room.enter(Some(Access::Write), 4).regression);
    }
}
