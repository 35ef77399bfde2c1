//! [`Space`]: the separate key spaces of locks, elections, semaphores and
//! read-write locks, the same in every backend.

use crate::access::{Access, SharedSpace};
use crate::admin::Primitive;

/// Where a name's state lives: locks, elections, semaphores and read-write
/// locks of one name are independent, each in a space of its own (the
/// semaphore `jobs` is not the lock `jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Mutexes.
    Lock,
    /// Leader elections.
    Election,
    /// Semaphores.
    Semaphore,
    /// Read-write locks.
    RwLock,
}

impl Space {
    /// Every space, in this order.
    pub const ALL: [Space; 4] = [
        Space::Lock,
        Space::Election,
        Space::Semaphore,
        Space::RwLock,
    ];

    /// The space of a semaphore permit or a side of a read-write lock.
    pub fn shared(access: Access) -> Space {
        match access.space() {
            SharedSpace::Semaphore => Space::Semaphore,
            SharedSpace::RwLock => Space::RwLock,
        }
    }

    /// Whether many grants share a name here (semaphores, read-write locks).
    pub fn is_shared(self) -> bool {
        matches!(self, Space::Semaphore | Space::RwLock)
    }

    /// What listings call a name in this space.
    pub fn primitive(self) -> Primitive {
        match self {
            Space::Lock => Primitive::Lock,
            Space::Election => Primitive::Election,
            Space::Semaphore => Primitive::Semaphore,
            Space::RwLock => Primitive::RwLock,
        }
    }

    /// `lock`, `election`, `semaphore` or `rwlock`, as in keys and listings.
    pub fn as_str(self) -> &'static str {
        self.primitive().as_str()
    }

    /// The plural, for a directory or key segment per space: `locks`,
    /// `elections`, `semaphores`, `rwlocks`.
    pub fn dir(self) -> &'static str {
        match self {
            Space::Lock => "locks",
            Space::Election => "elections",
            Space::Semaphore => "semaphores",
            Space::RwLock => "rwlocks",
        }
    }
}
