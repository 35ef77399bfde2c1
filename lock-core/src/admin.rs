//! Operating locks: who holds a lock and who waits, which locks exist, and
//! breaking a lock whose holder is stuck.
//!
//! These are the questions an operator asks when a job stalls behind a
//! lock. Backends answer them from what they store with each lock: the
//! holder's [description](crate::AcquireOptions::holder), its token and,
//! where the backend keeps them, when it took the lock and how long its
//! lease has left. [`Capabilities::admin`](crate::Capabilities::admin) says
//! what a backend can report.

use std::time::{Duration, SystemTime};

use crate::fencing::FencingToken;
use crate::name::LockName;

/// What a backend can report about its locks and whether it can break them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct AdminCapabilities {
    /// [`inspect`](crate::LockBackend::inspect) reports the holder.
    pub inspect: bool,
    /// `inspect` also lists the waiters (not only whether there are any).
    pub waiters: bool,
    /// `inspect` reports when the holder took the lock.
    pub acquired_at: bool,
    /// `inspect` reports the time left on the holder's lease.
    pub lease_left: bool,
    /// [`list`](crate::LockBackend::list) is implemented.
    pub list: bool,
    /// [`force_release`](crate::LockBackend::force_release) is implemented.
    pub force_release: bool,
}

impl AdminCapabilities {
    /// Every report and operation available.
    pub fn all() -> Self {
        AdminCapabilities {
            inspect: true,
            waiters: true,
            acquired_at: true,
            lease_left: true,
            list: true,
            force_release: true,
        }
    }

    /// Sets [`acquired_at`](Self::acquired_at).
    pub fn with_acquired_at(mut self, known: bool) -> Self {
        self.acquired_at = known;
        self
    }

    /// Sets [`lease_left`](Self::lease_left).
    pub fn with_lease_left(mut self, known: bool) -> Self {
        self.lease_left = known;
        self
    }

    /// Sets [`waiters`](Self::waiters).
    pub fn with_waiters(mut self, listed: bool) -> Self {
        self.waiters = listed;
        self
    }
}

/// The holder of a lock, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// The backend key (or node, or record) of the holding entry.
    pub key: String,
    /// The holder's fencing token.
    pub token: FencingToken,
    /// Who holds it. For a lock, the label it acquired with, by default
    /// `host:pid`. For an election, the leader's published value (what
    /// [`leader`](crate::ElectionBackend::leader) returns): that is how an
    /// operator tells candidates apart, and etcd and ZooKeeper store
    /// nothing else with a candidate. `None` when the holder is a client
    /// that stores no description (for example etcd's own `etcdctl lock`).
    pub description: Option<String>,
    /// When the holder took the lock, by the backend's clock, where known.
    pub acquired_at: Option<SystemTime>,
    /// How long the holder's lease has left, where known. The lease is
    /// renewed while the holder lives, so this is the time the lock would
    /// stay held if the holder died now.
    pub lease_left: Option<Duration>,
}

/// A client waiting for a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterInfo {
    /// The waiter's queue entry (key or node), where the backend has one.
    pub key: Option<String>,
    /// The waiter's description, where the backend stores one.
    pub description: Option<String>,
}

/// A lock's holder and waiters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStatus {
    /// The lock.
    pub name: LockName,
    /// What the name is used as: [`Primitive::Lock`], or
    /// [`Primitive::Election`] when only its election is in use (held or
    /// waited for). `inspect` and `force_release` act on a name's lock
    /// first and on its election otherwise, so an operator can name either.
    pub primitive: Primitive,
    /// The holder, if the lock is held.
    pub holder: Option<HolderInfo>,
    /// How many clients wait for it.
    pub waiting: usize,
    /// The waiters in queue order, where the backend can list them
    /// ([`AdminCapabilities::waiters`]); empty otherwise.
    pub waiters: Vec<WaiterInfo>,
}

impl LockStatus {
    /// A lock nobody holds or waits for.
    pub fn free(name: LockName) -> Self {
        LockStatus {
            name,
            primitive: Primitive::Lock,
            holder: None,
            waiting: 0,
            waiters: Vec::new(),
        }
    }

    /// Whether someone holds the lock.
    pub fn is_held(&self) -> bool {
        self.holder.is_some()
    }
}

/// The kind of primitive a listed name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// A mutex ([`LockBackend::acquire`](crate::LockBackend::acquire)).
    Lock,
    /// A leader election ([`ElectionBackend`](crate::ElectionBackend)).
    Election,
    /// A semaphore ([`Access::Permit`](crate::Access::Permit)).
    Semaphore,
    /// A read-write lock ([`Access::Read`](crate::Access::Read), [`Access::Write`](crate::Access::Write)).
    RwLock,
}

impl Primitive {
    /// The name used in listings and JSON: `lock`, `election`, `semaphore`, `rwlock`.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Election => "election",
            Primitive::Semaphore => "semaphore",
            Primitive::RwLock => "rwlock",
        }
    }
}

/// One lock (or election) that exists on the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedLock {
    /// Its name.
    pub name: LockName,
    /// What kind of primitive it is.
    pub primitive: Primitive,
    /// The holder's token, if it is held.
    pub holder_token: Option<FencingToken>,
    /// How many clients wait for it.
    pub waiting: usize,
}

/// Which part of a listing to return.
///
/// Listings are ordered by primitive, then name; ask for the next page
/// with [`ListPage::next`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOptions {
    /// Only names that start with this (`""`: every name).
    pub prefix: String,
    /// Start after this entry (from [`ListPage::next`]); `None`: from the start.
    pub after: Option<(Primitive, LockName)>,
    /// At most this many entries per page.
    pub limit: usize,
}

/// The default page size of a listing.
pub const DEFAULT_LIST_LIMIT: usize = 1000;

impl ListOptions {
    /// The first page of names starting with `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        ListOptions {
            prefix: prefix.into(),
            after: None,
            limit: DEFAULT_LIST_LIMIT,
        }
    }

    /// Sets the page size (at least 1).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// Sets where the page starts.
    pub fn after(mut self, after: Option<(Primitive, LockName)>) -> Self {
        self.after = after;
        self
    }

    /// Whether `entry` belongs on this page's side of [`after`](Self::after)
    /// and under its prefix. Backends that cannot filter on the server use it.
    pub fn admits(&self, primitive: Primitive, name: &LockName) -> bool {
        name.as_str().starts_with(&self.prefix)
            && self
                .after
                .as_ref()
                .is_none_or(|(p, n)| (primitive, name) > (*p, n))
    }

    /// Cuts `entries` (any order) to this page: filtered by
    /// [`admits`](Self::admits), sorted, at most `limit` long, with the
    /// continuation set when more remain.
    pub fn page(&self, entries: impl IntoIterator<Item = ListedLock>) -> ListPage {
        let mut locks: Vec<ListedLock> = entries
            .into_iter()
            .filter(|l| self.admits(l.primitive, &l.name))
            .collect();
        locks.sort_by(|a, b| (a.primitive, &a.name).cmp(&(b.primitive, &b.name)));
        locks.dedup_by(|a, b| a.primitive == b.primitive && a.name == b.name);
        let more = locks.len() > self.limit;
        locks.truncate(self.limit);
        let next = more
            .then(|| locks.last().map(|l| (l.primitive, l.name.clone())))
            .flatten();
        ListPage { locks, next }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// The entries, ordered by primitive, then name.
    pub locks: Vec<ListedLock>,
    /// Where the next page starts, if there is one.
    pub next: Option<(Primitive, LockName)>,
}

/// The holder description used when neither the acquire nor the config
/// sets one: `host:pid`, which is what an operator needs to find the
/// process.
///
/// The host name is read once per process and kept: reading it costs five
/// system calls, which showed up in every uncontended acquire. The pid is
/// asked each time, so a forked child names itself.
pub fn default_holder_description() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    format!("{}:{}", HOST.get_or_init(host_name), std::process::id())
}

/// Resolves the description to store with a grant: the acquire's, else the
/// backend's configured one, else [`default_holder_description`].
pub fn holder_description(per_acquire: Option<&str>, configured: Option<&str>) -> String {
    per_acquire
        .or(configured)
        .map_or_else(default_holder_description, str::to_owned)
}

fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(primitive: Primitive, name: &str) -> ListedLock {
        ListedLock {
            name: LockName::new(name).unwrap(),
            primitive,
            holder_token: None,
            waiting: 0,
        }
    }

    #[test]
    fn pages_are_ordered_filtered_and_continue_where_they_stopped() {
        let all = || {
            [
                listed(Primitive::Election, "jobs/b"),
                listed(Primitive::Lock, "jobs/c"),
                listed(Primitive::Lock, "other"),
                listed(Primitive::Lock, "jobs/a"),
            ]
        };
        let first = ListOptions::prefix("jobs/").limit(2).page(all());
        let names: Vec<_> = first.locks.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["jobs/a", "jobs/c"]);
        let second = ListOptions::prefix("jobs/")
            .limit(2)
            .after(first.next.clone())
            .page(all());
        assert_eq!(second.locks, [listed(Primitive::Election, "jobs/b")]);
        assert_eq!(second.next, None);
    }

    #[test]
    fn the_default_description_names_host_and_pid() {
        let description = default_holder_description();
        assert!(description.ends_with(&format!(":{}", std::process::id())));
        assert_eq!(holder_description(Some("a"), Some("b")), "a");
        assert_eq!(holder_description(None, Some("b")), "b");
    }
}
