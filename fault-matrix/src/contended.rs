//! What the matrix's clients contend on: the lock, the write side of a
//! read-write lock, or the single permit of a one-permit semaphore.
//!
//! Each is exclusive, so the checking resource's test (no two sections
//! at once, fenced writes in token order) measures the primitive's safety
//! under the same faults as the lock's.

use distlock_core::{Access, AcquireOptions, DynLockBackend, LockGuard, LockName, Result};

use super::faults::Fault;
use super::row::Row;

/// The primitive under fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Contended {
    /// The mutex.
    #[default]
    Lock,
    /// The write side of a read-write lock.
    Write,
    /// The permit of a semaphore with one permit.
    Permit,
}

impl Contended {
    /// Every primitive, in table order.
    pub const ALL: [Contended; 3] = [Contended::Lock, Contended::Write, Contended::Permit];

    /// What the full run contends on in `row`: the lock everywhere; on
    /// `etcd-3` the semaphore's permit as well, on `zk-3` the read-write
    /// lock's write side, each a row of its own at the ordinary trial
    /// count (the lock rows carry the many trials of the cells that can
    /// flip). `--contend` asks for any other mix.
    pub fn full(row: Row) -> Vec<Contended> {
        match row {
            Row::Etcd3 => vec![Contended::Lock, Contended::Permit],
            Row::Zk3 => vec![Contended::Lock, Contended::Write],
            _ => vec![Contended::Lock],
        }
    }

    /// `lock`, `rwlock-write` or `semaphore-1`.
    pub fn id(self) -> &'static str {
        match self {
            Contended::Lock => "lock",
            Contended::Write => "rwlock-write",
            Contended::Permit => "semaphore-1",
        }
    }

    /// The primitive an [`id`](Self::id) names.
    pub fn parse(text: &str) -> Option<Contended> {
        Contended::ALL.into_iter().find(|c| c.id() == text)
    }

    /// The row label of `row`'s cells: the backend's id for the lock,
    /// `etcd/rwlock-write` and the like otherwise.
    pub fn label(self, row: Row) -> String {
        match self {
            Contended::Lock => row.id().to_owned(),
            other => format!("{}/{}", row.id(), other.id()),
        }
    }

    /// Why `fault` on `row` does not apply to this primitive, if it does not.
    pub fn inapplicable(self, fault: Fault, row: Row) -> Option<&'static str> {
        match (self, fault, row) {
            (Contended::Lock, _, _) => None,
            (_, _, Row::Redlock) => Some("Redlock has no semaphores or read-write locks"),
            (_, Fault::BreakLock, _) => Some(
                "breaking a holder covers locks and elections, not semaphores or read-write locks",
            ),
            _ => None,
        }
    }

    /// Acquires `name` as this primitive.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`](distlock_core::LockBackend::acquire).
    pub async fn acquire(
        self,
        backend: &DynLockBackend,
        name: &LockName,
        options: &AcquireOptions,
    ) -> Result<LockGuard> {
        match self {
            Contended::Lock => backend.acquire(name, options).await,
            Contended::Write => backend.acquire_as(name, Access::Write, options).await,
            Contended::Permit => backend.acquire_as(name, Access::permit(1)?, options).await,
        }
    }
}
