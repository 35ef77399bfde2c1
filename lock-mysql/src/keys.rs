//! Where each primitive's queue lives: `{prefix}{space}/{name}`.
//!
//! Mutexes, elections, semaphores and read-write locks of one name are
//! independent, so each has a space of its own.

pub(crate) use distlock_core::raw::Space;
use distlock_core::{Access, Error, LockName, Result};

/// The longest key the tables hold (`VARBINARY(1024)`).
pub(crate) const MAX_KEY_LEN: usize = 1024;

/// The key of `name` in `space` under `prefix`.
pub(crate) fn key(prefix: &str, space: Space, name: &LockName) -> String {
    format!("{prefix}{}/{name}", space.as_str())
}

/// `InvalidName` for a key longer than the tables hold.
pub(crate) fn check_len(key: &str) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid_name(format!(
            "the mysql key {key:?} is {} bytes long with its prefix; the lock tables hold \
             at most {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

/// The space and name of a stored key under `prefix`, if it is one of ours.
pub(crate) fn parse(prefix: &str, key: &str) -> Option<(Space, LockName)> {
    let rest = key.strip_prefix(prefix)?;
    Space::ALL.into_iter().find_map(|space| {
        let name = rest.strip_prefix(space.as_str())?.strip_prefix('/')?;
        Some((space, LockName::new(name).ok()?))
    })
}

/// How an access is stored: its kind, and a permit's limit.
pub(crate) fn stored_access(access: Access) -> (&'static str, Option<u32>) {
    match access {
        Access::Permit(limit) => ("permit", Some(limit.get())),
        other => (other.as_str(), None),
    }
}

/// The access a stored row stands for.
pub(crate) fn loaded_access(kind: &str, permits: Option<u32>) -> Access {
    match (kind, permits) {
        ("read", _) => Access::Read,
        ("permit", Some(limit)) => Access::permit(limit).unwrap_or(Access::Write),
        _ => Access::Write,
    }
}
