//! The entries queued ahead of our node, and the one grant rule over them
//! ([`distlock_core::raw::blockers`]) for every kind of queue: a mutex or an
//! election (every entry exclusive), a semaphore, a read-write lock.
//!
//! The view is read from a listing and then shrinks as watched entries go:
//! a node created later sorts after ours, so nothing ever joins the entries
//! ahead of us. Since the rule only ever grants more when entries leave, a
//! grant decided on the view (which may still hold entries that are already
//! gone) is a grant on the real queue too. A departure that does not grant
//! us is followed by a new listing, which also catches a second node of
//! ours ahead of us (see `queue::drop_duplicates`).

use std::collections::HashMap;

use distlock_core::Permits;
use distlock_core::raw::Site;
use distlock_core::raw::{blockers, check_limit_agrees, parse_permits};
use distlock_core::{Access, ErrorKind, LockName, Result};
use futures::future::try_join_all;

use crate::deadline::Deadline;
use crate::keys::{Role, Space, entry_of};
use crate::session::Session;

/// What our node asks for: its role (the marker in its name) and the access
/// the grant rule applies to it. A lock or an election candidate is a
/// writer: granted when alone at the head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) name: &'a LockName,
    pub(crate) role: Role,
    pub(crate) access: Access,
}

impl<'a> Ask<'a> {
    /// The head of a mutex's or an election's queue.
    pub(crate) fn exclusive(name: &'a LockName, role: Role) -> Self {
        Ask {
            name,
            role,
            access: Access::Write,
        }
    }

    /// A semaphore permit, or a side of a read-write lock.
    pub(crate) fn shared(name: &'a LockName, access: Access) -> Self {
        let role = match access {
            Access::Permit(_) => Role::Permit,
            Access::Read => Role::Read,
            _ => Role::Write,
        };
        Ask { name, role, access }
    }

    pub(crate) fn space(&self) -> Space {
        self.role.space()
    }

    /// The data our node stores: a permit's limit on the first line (what
    /// later permits check theirs against), then the holder's description.
    pub(crate) fn node_data(&self, description: &[u8]) -> Vec<u8> {
        match self.access {
            Access::Permit(limit) => {
                let mut data = format!("{limit}\n").into_bytes();
                data.extend_from_slice(description);
                data
            }
            _ => description.to_vec(),
        }
    }
}

/// The limit a permit node stores on its first line.
fn stored_limit(data: &[u8]) -> Option<Permits> {
    let text = std::str::from_utf8(data).ok()?;
    parse_permits(text.split('\n').next()?)
}

/// The entries ahead of our node, oldest first, each with its access.
#[derive(Debug)]
pub(crate) struct Ahead {
    entries: Vec<(String, Access)>,
}

impl Ahead {
    /// The view of the nodes `ahead` of ours in `dir` (in queue order). A
    /// permit reads the limits stored in the nodes ahead that `known` (an
    /// earlier view) does not have (one pipelined round trip of `getData`);
    /// nodes found gone are left out.
    pub(crate) async fn read(
        session: &Session,
        dir: &str,
        ask: &Ask<'_>,
        ahead: &[String],
        known: Option<Ahead>,
        deadline: &Deadline,
        doing: &Site<'_>,
    ) -> Result<Ahead> {
        let paths = ahead.iter().map(|child| format!("{dir}/{child}"));
        let Access::Permit(ours) = ask.access else {
            let entries = paths
                .zip(ahead)
                .map(|(path, child)| {
                    let access = match entry_of(child, ask.space()) {
                        Some((_, Role::Read)) => Access::Read,
                        _ => Access::Write,
                    };
                    (path, access)
                })
                .collect();
            return Ok(Ahead { entries });
        };
        let known: HashMap<String, Access> = known
            .map(|view| view.entries.into_iter().collect())
            .unwrap_or_default();
        let known = &known;
        let paths: Vec<String> = paths.collect();
        let reads = paths.iter().map(|path| async move {
            if let Some(access) = known.get(path) {
                return Ok(Some(*access));
            }
            let data = crate::queue::retried(
                session,
                deadline,
                doing,
                ("read", "reading"),
                path,
                None,
                move || {
                    let read = session.client.get_data(path);
                    async move { read.await.map(|(data, _)| Some(data)) }
                },
            )
            .await?;
            Ok(data.map(|data| {
                Access::Permit(stored_limit(&data).unwrap_or_else(|| {
                    // Not one of ours: counted as a holder, with our limit.
                    tracing::warn!(%path, "zk permit node without a stored limit");
                    ours
                }))
            }))
        });
        let accesses = try_join_all(reads).await?;
        // Nodes found gone (`None`) are left out.
        let entries = paths
            .into_iter()
            .zip(accesses)
            .filter_map(|(path, access)| Some((path, access?)))
            .collect();
        Ok(Ahead { entries })
    }

    fn accesses(&self) -> Vec<Access> {
        self.entries.iter().map(|(_, access)| *access).collect()
    }

    /// `InvalidConfig` when a permit ahead has another limit than ours.
    pub(crate) fn check_limits(&self, ask: &Ask<'_>, doing: &Site<'_>) -> Result<()> {
        check_limit_agrees(ask.name, ask.access, &self.accesses())
            .map_err(|e| doing.error(ErrorKind::InvalidConfig, e.message()))
    }

    /// The paths of the entries whose departure we wait for; empty when
    /// granted.
    pub(crate) fn blockers(&self, ask: &Ask<'_>) -> Vec<String> {
        blockers(ask.access, &self.accesses())
            .into_iter()
            .map(|position| self.entries[position].0.clone())
            .collect()
    }

    /// Forgets an entry that is gone.
    pub(crate) fn gone(&mut self, path: &str) {
        self.entries.retain(|(entry, _)| entry != path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_stores_its_limit_before_the_description() {
        let name = LockName::new("jobs").unwrap();
        let ask = Ask::shared(&name, Access::permit(3).unwrap());
        let data = ask.node_data(b"host:1");
        assert_eq!(data, b"3\nhost:1");
        assert_eq!(stored_limit(&data), Permits::new(3).ok());
        assert_eq!(stored_limit(b"host:1"), None);
        assert_eq!(Ask::shared(&name, Access::Read).node_data(b"d"), b"d");
        assert_eq!(Ask::shared(&name, Access::Write).role, Role::Write);
    }

    #[test]
    fn the_view_names_the_blocking_paths() {
        let name = LockName::new("rw").unwrap();
        let mut ahead = Ahead {
            entries: vec![
                ("/d/r1".to_owned(), Access::Read),
                ("/d/w1".to_owned(), Access::Write),
                ("/d/r2".to_owned(), Access::Read),
            ],
        };
        let reader = Ask::shared(&name, Access::Read);
        assert_eq!(ahead.blockers(&reader), vec!["/d/w1".to_owned()]);
        ahead.gone("/d/w1");
        assert!(ahead.blockers(&reader).is_empty());
        let writer = Ask::shared(&name, Access::Write);
        assert_eq!(ahead.blockers(&writer), vec!["/d/r2".to_owned()]);
    }
}
