//! Semaphores and read-write locks: how one grant shares its name with others.
//!
//! A mutex admits one holder. A semaphore admits up to its limit of permit
//! holders, and a read-write lock any number of readers or one writer. All
//! three are the same queue: contenders line up in arrival order, and each
//! is granted once the entries ahead of it allow ([`blockers`]). Queue-based
//! backends (etcd, ZooKeeper, memory) apply that one rule, and a waiter
//! watches only the entries that [`blockers`] names, so a departure wakes
//! only the waiters it can let in.
//!
//! Every grant of a name, whatever its access, takes its fencing token from
//! one sequence, so tokens follow the queue: a writer's token is higher
//! than every earlier grant's, and lower than every later one's.

use std::fmt;
use std::num::NonZeroU32;

use crate::error::{Error, Result};
use crate::name::LockName;

/// How many permits a semaphore has: at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permits(NonZeroU32);

impl Permits {
    /// `limit` permits; zero is `InvalidConfig`, before any I/O.
    pub fn new(limit: u32) -> Result<Self> {
        NonZeroU32::new(limit)
            .map(Permits)
            .ok_or_else(|| Error::invalid_config("a semaphore needs at least 1 permit, got 0"))
    }

    /// The number of permits.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl fmt::Display for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What one acquisition of a shared primitive asks for.
///
/// Semaphores and read-write locks live in spaces of their own: the
/// semaphore `jobs`, the read-write lock `jobs` and the mutex `jobs` are
/// three independent things.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Access {
    /// One of at most this many holders of a semaphore.
    Permit(Permits),
    /// A reader of a read-write lock, alongside any other readers.
    Read,
    /// The writer of a read-write lock, alone.
    Write,
}

impl Access {
    /// A permit of a semaphore with `limit` permits (`InvalidConfig` for 0).
    pub fn permit(limit: u32) -> Result<Self> {
        Permits::new(limit).map(Access::Permit)
    }

    /// What this acquires, for messages: `a permit of semaphore jobs (limit 3)`.
    pub fn describe(&self, name: &LockName) -> String {
        match self {
            Access::Permit(limit) => format!("a permit of semaphore {name} (limit {limit})"),
            Access::Read => format!("the read side of read-write lock {name}"),
            Access::Write => format!("the write side of read-write lock {name}"),
        }
    }

    /// The primitive whose space this access lives in.
    pub fn space(&self) -> SharedSpace {
        match self {
            Access::Permit(_) => SharedSpace::Semaphore,
            Access::Read | Access::Write => SharedSpace::RwLock,
        }
    }

    /// A short tag for keys and stored values: `permit`, `read`, `write`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Access::Permit(_) => "permit",
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// The two spaces shared primitives live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharedSpace {
    /// Semaphores.
    Semaphore,
    /// Read-write locks.
    RwLock,
}

impl SharedSpace {
    /// The space's name in keys and paths: `semaphore`, `rwlock`.
    pub fn as_str(self) -> &'static str {
        match self {
            SharedSpace::Semaphore => "semaphore",
            SharedSpace::RwLock => "rwlock",
        }
    }
}

/// The positions in `ahead` (the entries queued before this one, oldest
/// first, held or waiting) whose departure this entry must wait for.
/// Empty means granted now.
///
/// - A permit is granted while fewer than `limit` entries are ahead. It
///   waits on the `limit` entries right ahead of it: while those stay, at
///   least `limit` are ahead, and when one goes it is worth a look. Only
///   the `limit` waiters behind a departing entry wake.
/// - A writer is granted when nothing is ahead, and waits on its
///   predecessor.
/// - A reader is granted when no writer is ahead, and waits on the last
///   writer ahead of it. So a reader that arrives after a waiting writer
///   waits for it, and writers never starve.
///
/// When a watched entry goes, the waiter reads the queue again and calls
/// this again: an entry further ahead may still block it.
pub fn blockers(access: Access, ahead: &[Access]) -> Vec<usize> {
    match access {
        Access::Permit(limit) => {
            let limit = limit.get() as usize;
            if ahead.len() < limit {
                Vec::new()
            } else {
                (ahead.len() - limit..ahead.len()).collect()
            }
        }
        Access::Write => ahead.len().checked_sub(1).into_iter().collect(),
        Access::Read => ahead
            .iter()
            .rposition(|a| *a == Access::Write)
            .into_iter()
            .collect(),
    }
}

/// Checks that every permit ahead agrees with this one on the semaphore's
/// limit: `InvalidConfig` naming both limits when one does not.
///
/// An entry only checks the entries ahead of it, and is granted only when
/// they agree, so every holder of one semaphore shares the first one's
/// limit even when clients with different limits race.
pub fn check_limit_agrees(name: &LockName, access: Access, ahead: &[Access]) -> Result<()> {
    let Access::Permit(mine) = access else {
        return Ok(());
    };
    match ahead.iter().find_map(|a| match a {
        Access::Permit(theirs) if *theirs != mine => Some(*theirs),
        _ => None,
    }) {
        Some(theirs) => Err(Error::invalid_config(format!(
            "semaphore {name} is in use with a limit of {theirs} permits, not {mine}: every \
             holder of one semaphore must agree on its limit"
        ))),
        None => Ok(()),
    }
}

/// The limit stored with a queued permit, parsed back: the inverse of
/// [`Permits`]' `Display`. Returns `None` for anything else.
pub fn parse_permits(stored: &str) -> Option<Permits> {
    stored
        .trim()
        .parse::<u32>()
        .ok()
        .and_then(|n| Permits::new(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permits(n: u32) -> Access {
        Access::permit(n).unwrap()
    }

    #[test]
    fn zero_permits_is_invalid_config() {
        let err = Permits::new(0).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("at least 1 permit"), "{err}");
    }

    #[test]
    fn a_permit_waits_on_the_limit_entries_right_ahead() {
        let p = permits(2);
        assert!(blockers(p, &[]).is_empty());
        assert!(blockers(p, &[p]).is_empty());
        assert_eq!(blockers(p, &[p, p]), vec![0, 1]);
        assert_eq!(blockers(p, &[p, p, p, p]), vec![2, 3]);
    }

    #[test]
    fn one_permit_behaves_as_a_mutex() {
        let p = permits(1);
        assert_eq!(blockers(p, &[p, p, p]), blockers(Access::Write, &[p, p, p]));
    }

    #[test]
    fn a_writer_waits_on_its_predecessor() {
        use Access::{Read, Write};
        assert!(blockers(Write, &[]).is_empty());
        assert_eq!(blockers(Write, &[Read, Read]), vec![1]);
        assert_eq!(blockers(Write, &[Write, Read]), vec![1]);
    }

    #[test]
    fn a_reader_waits_on_the_last_writer_ahead() {
        use Access::{Read, Write};
        assert!(blockers(Read, &[Read, Read]).is_empty());
        assert_eq!(blockers(Read, &[Read, Write, Read]), vec![1]);
        assert_eq!(blockers(Read, &[Write, Read, Write, Read]), vec![2]);
    }

    #[test]
    fn limits_must_agree_with_every_entry_ahead() {
        let name = LockName::new("jobs").unwrap();
        assert!(check_limit_agrees(&name, permits(3), &[permits(3)]).is_ok());
        let err = check_limit_agrees(&name, permits(3), &[permits(3), permits(2)]).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
        let message = err.to_string();
        assert!(
            message.contains("limit of 2") && message.contains("not 3"),
            "{message}"
        );
    }

    #[test]
    fn stored_limits_parse_back() {
        assert_eq!(parse_permits("3"), Permits::new(3).ok());
        assert_eq!(parse_permits("0"), None);
        assert_eq!(parse_permits("x"), None);
    }
}
