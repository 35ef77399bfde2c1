//! Where each primitive's queue lives: `{prefix}{space}/{name}`.
//!
//! Mutexes, elections, semaphores and read-write locks of one name are
//! independent, so each has a space of its own.

pub(crate) use distlock_core::raw::Space;
use distlock_core::{Access, LockName};

/// The key of `name` in `space` under `prefix`.
pub(crate) fn key(prefix: &str, space: Space, name: &LockName) -> String {
    format!("{prefix}{}/{name}", space.as_str())
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
pub(crate) fn stored_access(access: Access) -> (&'static str, Option<i32>) {
    match access {
        Access::Permit(limit) => (
            "permit",
            Some(i32::try_from(limit.get()).unwrap_or(i32::MAX)),
        ),
        other => (other.as_str(), None),
    }
}
