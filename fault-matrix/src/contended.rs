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
    /// Locks on many names, each client holding several at once: the
    /// backend's shared renewal and (etcd) its shared keepalive stream
    /// carry every lease of a client together.
    Many,
}

/// How many names the many-names row's clients contend on.
pub const MANY_NAMES: usize = 50;

/// How many of them each client holds at once: with four clients, about
/// half the names are held at any moment, so that they still contend.
pub const HELD_AT_ONCE: usize = 6;

impl Contended {
    /// Every primitive, in table order.
    pub const ALL: [Contended; 4] = [
        Contended::Lock,
        Contended::Write,
        Contended::Permit,
        Contended::Many,
    ];

    /// What the full run contends on in `row`: the lock everywhere; on
    /// `etcd-3` the semaphore's permit and many names as well, on `zk-3`
    /// the read-write lock's write side, each a row of its own at the
    /// ordinary trial count (the lock rows carry the many trials of the
    /// cells that can flip). `--contend` asks for any other mix.
    ///
    /// Many names run on `etcd-3` alone: etcd is where one client's leases
    /// share the most (one renewal task and one keepalive stream per
    /// client, whose answers must reach the right lease), and the three
    /// members give it the leader and member faults that cut or stall
    /// that stream.
    pub fn full(row: Row) -> Vec<Contended> {
        match row {
            Row::Etcd3 => vec![Contended::Lock, Contended::Permit, Contended::Many],
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
            Contended::Many => "many-names",
        }
    }

    /// How many names a client holds at once.
    pub fn held_at_once(self) -> usize {
        match self {
            Contended::Many => HELD_AT_ONCE,
            _ => 1,
        }
    }

    /// The names a client acquires next, in the order to acquire them:
    /// `lock` itself, or [`HELD_AT_ONCE`] of the [`MANY_NAMES`] under it,
    /// drawn by `rng`, in name order.
    pub fn names_to_hold(self, lock: &str, rng: &mut impl rand::Rng) -> Vec<String> {
        match self {
            Contended::Many => {
                let mut picked = rand::seq::index::sample(rng, MANY_NAMES, HELD_AT_ONCE).into_vec();
                picked.sort_unstable();
                picked.iter().map(|i| format!("{lock}/{i:02}")).collect()
            }
            _ => vec![lock.to_owned()],
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
            (
                Contended::Many,
                Fault::None
                | Fault::PauseHolder
                | Fault::PartitionHolder
                | Fault::KillLeader
                | Fault::FreezeMember
                | Fault::IsolateFollower
                | Fault::PauseServer,
                _,
            ) => None,
            (_, Fault::StaleTurn, _) => Some(
                "fault 14 finds the victim at the head of a mutex's queue, where the next \
                 holder is the first key",
            ),
            (Contended::Many, _, _) => Some(
                "many names run the faults that stall or cut a client's renewals and its \
                 keepalive stream",
            ),
            (_, _, Row::Redlock) => Some("Redlock has no semaphores or read-write locks"),
            (_, _, Row::PostgresAdvisory) => {
                Some("PostgreSQL's advisory layout has no semaphores or read-write locks")
            }
            (_, _, Row::MysqlNamed) => {
                Some("MySQL's named layout has no semaphores or read-write locks")
            }
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
            Contended::Lock | Contended::Many => backend.acquire(name, options).await,
            Contended::Write => backend.acquire_as(name, Access::Write, options).await,
            Contended::Permit => backend.acquire_as(name, Access::permit(1)?, options).await,
        }
    }
}
