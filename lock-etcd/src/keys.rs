//! Where locks and elections live in etcd's key space: the [`KeyLayout`].
//!
//! In the `distlock` layout a contender's key is
//! `<prefix>/lock/<name>/<lease-hex>` (elections use `election` instead of
//! `lock`). The name is escaped so it never contains `/`: otherwise the
//! queue of `a` (`.../a/`) would also hold every contender for `a/b`.
//!
//! In the `concurrency` layout the key is `<name>/<lease-hex>`, byte for
//! byte what etcd's Go `concurrency.Mutex` and `concurrency.Election` (and
//! `etcdctl lock` / `etcdctl elect`) write for the same name, so both sides
//! queue in one range. The name is the raw key prefix: no prefix, no
//! escaping, and a lock and an election of one name share a queue.
//!
//! In both, the lease id in the last segment makes the key unique per
//! holder and lets tools find the lease behind a key.
//!
//! Semaphores and read-write locks always use the `distlock` layout's
//! spaces, `<prefix>/semaphore/<escaped name>/` and
//! `<prefix>/rwlock/<escaped name>/`, whatever the layout: Go's
//! `concurrency` package has no semaphore, and etcd's `recipes` RWMutex
//! keeps its keys in a way this queue cannot share.

use std::fmt;
use std::str::FromStr;

use distlock_core::{Access, Error, LockName};
use serde::{Deserialize, Serialize};

/// How lock and election names map to etcd keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyLayout {
    /// `<prefix>/lock/<escaped name>/<lease-hex>`: this crate's own layout,
    /// with locks and elections apart.
    #[default]
    Distlock,
    /// `<name>/<lease-hex>`: the keys of etcd's Go `concurrency` package
    /// and of `etcdctl lock` / `etcdctl elect`, to share locks and
    /// elections with them.
    Concurrency,
}

impl KeyLayout {
    /// Every layout, in the order messages list them.
    pub const ALL: [KeyLayout; 2] = [KeyLayout::Distlock, KeyLayout::Concurrency];

    /// The layout's name in URLs and config files.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyLayout::Distlock => "distlock",
            KeyLayout::Concurrency => "concurrency",
        }
    }

    pub(crate) fn is_default(&self) -> bool {
        *self == KeyLayout::default()
    }
}

impl fmt::Display for KeyLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyLayout {
    type Err = Error;

    /// `distlock` or `concurrency`; anything else is `InvalidConfig`
    /// listing those.
    fn from_str(s: &str) -> Result<Self, Error> {
        KeyLayout::ALL
            .into_iter()
            .find(|layout| layout.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = KeyLayout::ALL.iter().map(|l| l.as_str()).collect();
                Error::invalid_config(format!(
                    "unknown etcd key layout {s:?}; known: {}",
                    known.join(", ")
                ))
            })
    }
}

/// Which queue an entry joins: locks, elections, semaphores and read-write
/// locks are separate queues even when their names match. A shared entry
/// also says what it asks for, which decides whom it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Lock,
    Election,
    /// A semaphore (`Access::Permit`) or read-write lock (`Read`, `Write`).
    Shared(Access),
}

impl Space {
    /// The word used in messages: `lock`, `election`, `semaphore`,
    /// `read-write lock`.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Space::Shared(Access::Permit(_)) => "semaphore",
            Space::Shared(_) => "read-write lock",
            other => other.segment(),
        }
    }

    /// The access of a shared entry; `None` for locks and elections, whose
    /// entries are all exclusive.
    pub(crate) fn access(self) -> Option<Access> {
        match self {
            Space::Shared(access) => Some(access),
            Space::Lock | Space::Election => None,
        }
    }

    fn segment(self) -> &'static str {
        match self {
            Space::Lock => "lock",
            Space::Election => "election",
            Space::Shared(access) => access.space().as_str(),
        }
    }
}

/// The keys of one backend: its layout and (for `distlock`) its prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    root: String,
    layout: KeyLayout,
}

/// What connecting reads to prove that a member with a leader answers.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// Read as a count-only prefix range.
    pub(crate) range: String,
    /// Whether being refused this range is an error. Only where every key
    /// of ours lies in it: in the `concurrency` layout names are raw key
    /// prefixes, so a role may be granted just the names it uses, and a
    /// refusal (which etcd answers only after a quorum read) still shows
    /// the cluster works.
    pub(crate) must_be_readable: bool,
}

impl KeySpace {
    pub(crate) fn new(prefix: &str, layout: KeyLayout) -> Self {
        KeySpace {
            root: prefix.trim_end_matches('/').to_owned(),
            layout,
        }
    }

    pub(crate) fn probe(&self) -> Probe {
        match self.layout {
            KeyLayout::Distlock => Probe {
                range: format!("{}/", self.root),
                must_be_readable: true,
            },
            // A range nobody writes: NUL is not allowed in names.
            KeyLayout::Concurrency => Probe {
                range: "\0".to_owned(),
                must_be_readable: false,
            },
        }
    }

    /// The queue of `name`: every contender's key starts with this. In the
    /// `distlock` layout (and for shared primitives) no other key does; in
    /// the `concurrency` layout the queue of `a` also holds the keys of
    /// `a/b`, as in Go.
    pub(crate) fn queue(&self, space: Space, name: &LockName) -> String {
        match self.layout_of(space) {
            KeyLayout::Distlock => format!(
                "{}/{}/{}/",
                self.root,
                space.segment(),
                escape(name.as_str())
            ),
            KeyLayout::Concurrency => format!("{}/", name.as_str()),
        }
    }

    /// The key of the contender holding `lease` in `queue`.
    pub(crate) fn entry(queue: &str, lease: i64) -> String {
        format!("{queue}{lease:x}")
    }

    pub(crate) fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// The layout keys of `space` follow: shared primitives have no Go
    /// counterpart, so they always keep to the `distlock` layout.
    fn layout_of(&self, space: Space) -> KeyLayout {
        match space {
            Space::Shared(_) => KeyLayout::Distlock,
            Space::Lock | Space::Election => self.layout,
        }
    }

    /// Where the keys of every queue of `space` start: `<prefix>/lock/`
    /// (`distlock`), nothing (`concurrency`).
    fn space_root(&self, space: Space) -> String {
        match self.layout_of(space) {
            KeyLayout::Distlock => format!("{}/{}/", self.root, space.segment()),
            KeyLayout::Concurrency => String::new(),
        }
    }

    /// The first key of the range holding the queues of every name of
    /// `space` that starts with `prefix`; the range ends at
    /// [`range_end`] of it.
    pub(crate) fn names_from(&self, space: Space, prefix: &str) -> String {
        match self.layout_of(space) {
            KeyLayout::Distlock => format!("{}{}", self.space_root(space), escape(prefix)),
            KeyLayout::Concurrency => prefix.to_owned(),
        }
    }

    /// The name whose queue holds the contender key `key` of `space`
    /// written under `lease`, or `None` if `key` is no contender key: its
    /// last segment must be its own lease id, as this crate and Go's
    /// `concurrency` package write it.
    pub(crate) fn name_of_entry(&self, space: Space, key: &[u8], lease: i64) -> Option<LockName> {
        let key = std::str::from_utf8(key).ok()?;
        let (queue, hex) = key.rsplit_once('/')?;
        if lease <= 0 || hex != format!("{lease:x}") {
            return None;
        }
        let name = match self.layout_of(space) {
            KeyLayout::Distlock => {
                let escaped = queue.strip_prefix(&self.space_root(space))?;
                if escaped.contains('/') {
                    return None;
                }
                unescape(escaped)?
            }
            KeyLayout::Concurrency => queue.to_owned(),
        };
        LockName::new(name).ok()
    }
}

/// The end of etcd's range of every key that starts with `prefix`
/// (`"\0"`, etcd's "to the end", when no key is greater).
pub(crate) fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The lease id in the last segment of a contender key, as written by this
/// crate (`.../<lease-hex>`). Useful to revoke a holder's lease from outside.
pub fn lease_of_key(key: &str) -> Option<i64> {
    let hex = key.rsplit('/').next()?;
    i64::from_str_radix(hex, 16).ok().filter(|id| *id > 0)
}

/// Escapes `%` and `/` as `%25` and `%2F`; everything else stays readable.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
    out
}

/// Undoes [`escape`]; `None` for text [`escape`] never writes.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at..at + 3)?;
        out.push(match code {
            "%25" => '%',
            "%2F" => '/',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_queue_never_contains_a_longer_names_keys() {
        let keys = KeySpace::new("/p/", KeyLayout::Distlock);
        let short = keys.queue(Space::Lock, &LockName::new("a").unwrap());
        let long = keys.queue(Space::Lock, &LockName::new("a/b").unwrap());
        assert_eq!(short, "/p/lock/a/");
        assert_eq!(long, "/p/lock/a%2Fb/");
        assert!(!long.starts_with(&short));
        let election = keys.queue(Space::Election, &LockName::new("a").unwrap());
        assert!(!election.starts_with(&short));
        let range = keys.probe().range;
        assert!(short.starts_with(&range) && election.starts_with(&range));
        let probe = KeySpace::new("/p", KeyLayout::Distlock).probe();
        assert_eq!(probe.range, "/p/");
        assert!(probe.must_be_readable);
    }

    #[test]
    fn shared_primitives_have_spaces_of_their_own_in_every_layout() {
        let name = LockName::new("a/b").unwrap();
        let permit = Space::Shared(Access::permit(3).unwrap());
        for layout in KeyLayout::ALL {
            let keys = KeySpace::new("/p", layout);
            assert_eq!(keys.queue(permit, &name), "/p/semaphore/a%2Fb/");
            for access in [Access::Read, Access::Write] {
                assert_eq!(keys.queue(Space::Shared(access), &name), "/p/rwlock/a%2Fb/");
            }
        }
        let keys = KeySpace::new("/p", KeyLayout::Distlock);
        let lock = keys.queue(Space::Lock, &name);
        let rwlock = keys.queue(Space::Shared(Access::Read), &name);
        assert!(!lock.starts_with(&rwlock) && !rwlock.starts_with(&lock));
        assert_eq!(permit.noun(), "semaphore");
        assert_eq!(Space::Shared(Access::Write).noun(), "read-write lock");
    }

    #[test]
    fn lease_id_round_trips_through_the_key() {
        let key = KeySpace::entry("/p/lock/a%25b/", 0x694d_8a3b_22c1_0f07);
        assert_eq!(key, "/p/lock/a%25b/694d8a3b22c10f07");
        assert_eq!(lease_of_key(&key), Some(0x694d_8a3b_22c1_0f07));
        assert_eq!(lease_of_key("/p/lock/a/"), None);
    }

    #[test]
    fn concurrency_keys_are_the_go_mutex_keys_for_the_raw_name() {
        // concurrency.NewMutex(session, "/jobs/nightly") writes
        // "/jobs/nightly/" + lease in lower-case hex; a trailing `/` in the
        // name is kept, as Go keeps it ("a/" becomes "a//").
        let keys = KeySpace::new("/ignored", KeyLayout::Concurrency);
        for (name, queue) in [
            ("/jobs/nightly", "/jobs/nightly/"),
            ("interop", "interop/"),
            ("a/", "a//"),
            ("100%", "100%/"),
        ] {
            let name = LockName::new(name).unwrap();
            assert_eq!(keys.queue(Space::Lock, &name), queue);
            assert_eq!(keys.queue(Space::Election, &name), queue);
        }
        let key = KeySpace::entry("interop/", 0x694d_a233_b216_3c05);
        assert_eq!(key, "interop/694da233b2163c05");
        assert_eq!(lease_of_key(&key), Some(0x694d_a233_b216_3c05));
        assert!(!keys.probe().must_be_readable);
    }

    #[test]
    fn entry_keys_give_back_their_names_and_other_keys_none() {
        let lease = 0x694d_8a3b_22c1_0f07;
        let keys = KeySpace::new("/p", KeyLayout::Distlock);
        for text in ["a", "a/b", "100%", "%2F", "x/"] {
            let name = LockName::new(text).unwrap();
            for space in [Space::Lock, Space::Election] {
                let key = KeySpace::entry(&keys.queue(space, &name), lease);
                assert_eq!(
                    keys.name_of_entry(space, key.as_bytes(), lease),
                    Some(name.clone()),
                    "{key}"
                );
                assert!(key.starts_with(&keys.names_from(space, text)), "{key}");
            }
            let key = KeySpace::entry(&keys.queue(Space::Lock, &name), lease);
            assert_eq!(
                keys.name_of_entry(Space::Election, key.as_bytes(), lease),
                None
            );
            assert_eq!(
                keys.name_of_entry(Space::Lock, key.as_bytes(), lease + 1),
                None
            );
        }
        for stray in [
            "/p/lock/a/b/694d8a3b22c10f07",
            "/p/lock/a%2/694d8a3b22c10f07",
            "/q/lock/a/694d8a3b22c10f07",
        ] {
            assert_eq!(
                keys.name_of_entry(Space::Lock, stray.as_bytes(), lease),
                None,
                "{stray}"
            );
        }
        let go = KeySpace::new("/ignored", KeyLayout::Concurrency);
        let name = go.name_of_entry(Space::Lock, b"/jobs/a/694d8a3b22c10f07", lease);
        assert_eq!(name, Some(LockName::new("/jobs/a").unwrap()));
        assert_eq!(go.name_of_entry(Space::Lock, b"/config/db", 0), None);
        assert_eq!(go.names_from(Space::Lock, "/jobs/"), "/jobs/");
    }

    #[test]
    fn range_ends_follow_etcds_prefix_rule() {
        assert_eq!(range_end(b"/p/lock/"), b"/p/lock0");
        assert_eq!(range_end(b"a\xff"), b"b");
        assert_eq!(range_end(b""), b"\0");
        assert_eq!(range_end(b"\xff\xff"), b"\0");
    }

    #[test]
    fn layouts_parse_from_their_names_only() {
        for layout in KeyLayout::ALL {
            assert_eq!(layout.as_str().parse::<KeyLayout>().unwrap(), layout);
        }
        for bad in ["curator", "Concurrency", ""] {
            let err = bad.parse::<KeyLayout>().unwrap_err();
            assert_eq!(err.kind(), distlock_core::ErrorKind::InvalidConfig);
            assert!(
                err.message().contains("known: distlock, concurrency"),
                "{err}"
            );
        }
        assert_eq!(KeyLayout::default(), KeyLayout::Distlock);
    }
}
