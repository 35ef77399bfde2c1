//! Where locks and elections live in etcd's key space.
//!
//! A contender's key is `<prefix>/lock/<name>/<lease-hex>` (elections use
//! `election` instead of `lock`). The name is escaped so it never contains
//! `/`: otherwise the queue of `a` (`.../a/`) would also hold every
//! contender for `a/b`. The lease id in the last segment makes the key
//! unique per holder, and lets tools find the lease behind a key.

use lock_core::LockName;

/// Locks and elections are separate queues even when their names match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Lock,
    Election,
}

impl Space {
    /// The word used in messages: `lock` or `election`.
    pub(crate) fn noun(self) -> &'static str {
        self.segment()
    }

    fn segment(self) -> &'static str {
        match self {
            Space::Lock => "lock",
            Space::Election => "election",
        }
    }
}

/// The key layout under one configured prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    root: String,
}

impl KeySpace {
    pub(crate) fn new(prefix: &str) -> Self {
        KeySpace {
            root: prefix.trim_end_matches('/').to_owned(),
        }
    }

    /// `<prefix>/`: every key this backend writes starts with it.
    pub(crate) fn range(&self) -> String {
        format!("{}/", self.root)
    }

    /// The queue of `name`: every contender's key starts with this, and no
    /// other key does.
    pub(crate) fn queue(&self, space: Space, name: &LockName) -> String {
        format!(
            "{}/{}/{}/",
            self.root,
            space.segment(),
            escape(name.as_str())
        )
    }

    /// The key of the contender holding `lease` in `queue`.
    pub(crate) fn entry(queue: &str, lease: i64) -> String {
        format!("{queue}{lease:x}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_queue_never_contains_a_longer_names_keys() {
        let keys = KeySpace::new("/p/");
        let short = keys.queue(Space::Lock, &LockName::new("a").unwrap());
        let long = keys.queue(Space::Lock, &LockName::new("a/b").unwrap());
        assert_eq!(short, "/p/lock/a/");
        assert_eq!(long, "/p/lock/a%2Fb/");
        assert!(!long.starts_with(&short));
        let election = keys.queue(Space::Election, &LockName::new("a").unwrap());
        assert!(!election.starts_with(&short));
        assert!(short.starts_with(&keys.range()) && election.starts_with(&keys.range()));
        assert_eq!(KeySpace::new("/p").range(), "/p/");
    }

    #[test]
    fn lease_id_round_trips_through_the_key() {
        let key = KeySpace::entry("/p/lock/a%25b/", 0x694d_8a3b_22c1_0f07);
        assert_eq!(key, "/p/lock/a%25b/694d8a3b22c10f07");
        assert_eq!(lease_of_key(&key), Some(0x694d_8a3b_22c1_0f07));
        assert_eq!(lease_of_key("/p/lock/a/"), None);
    }
}
