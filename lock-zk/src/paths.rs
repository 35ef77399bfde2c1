//! Where locks live in the ZooKeeper tree, and how contender nodes are named.
//!
//! ```text
//! {root}/locks/{escaped name}/_c_{guid}-lock-{sequence}       one node per contender
//! {root}/elections/{escaped name}/_c_{guid}-latch-{sequence}  one node per candidate
//! ```
//!
//! The per-name directory is a container node (the server deletes it once it
//! is empty). The GUID makes each acquisition's node recognisable after a
//! connection loss during `create` (Curator's "protected" names).

use lock_core::{Error, LockName, Result};
use uuid::Uuid;

/// Locks and elections live in separate directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Lock,
    Election,
}

impl Space {
    fn dir(self) -> &'static str {
        match self {
            Space::Lock => "locks",
            Space::Election => "elections",
        }
    }

    /// The part of a node name between the GUID and the sequence number.
    fn marker(self) -> &'static str {
        match self {
            Space::Lock => "lock-",
            Space::Election => "latch-",
        }
    }
}

/// The validated lock root (the URL's path) and the paths derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Absolute, without a trailing slash; empty for `/`.
    root: String,
}

impl Layout {
    /// Validates `prefix` as an absolute ZooKeeper path.
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        if !prefix.starts_with('/') {
            return Err(Error::invalid_config(format!(
                "zk lock root {prefix:?} must be an absolute path such as /distlock"
            )));
        }
        let root = prefix.trim_end_matches('/');
        for component in root.split('/').skip(1) {
            let problem = match component {
                "" => Some("an empty component (//)"),
                "." | ".." => Some("a . or .. component"),
                c if c.chars().any(is_forbidden_char) => Some("a character ZooKeeper forbids"),
                _ => None,
            };
            if let Some(problem) = problem {
                return Err(Error::invalid_config(format!(
                    "zk lock root {prefix:?} contains {problem}"
                )));
            }
        }
        Ok(Layout {
            root: root.to_owned(),
        })
    }

    /// The root as given (`/` for the tree's root).
    pub(crate) fn root(&self) -> &str {
        if self.root.is_empty() {
            "/"
        } else {
            &self.root
        }
    }

    /// `{root}/locks` or `{root}/elections`.
    pub(crate) fn space_dir(&self, space: Space) -> String {
        format!("{}/{}", self.root, space.dir())
    }

    /// The directory holding the contenders of one name.
    pub(crate) fn name_dir(&self, space: Space, name: &LockName) -> String {
        format!("{}/{}", self.space_dir(space), escape_name(name.as_str()))
    }
}

/// Characters ZooKeeper rejects in a path (besides `/`): controls, the
/// private-use area, U+FFF0..U+FFFF, and everything outside the Basic
/// Multilingual Plane (emoji, for example): the server checks paths as Java
/// UTF-16 strings and refuses every surrogate.
fn is_forbidden_char(c: char) -> bool {
    c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c) || c >= '\u{fff0}'
}

/// Maps a lock name to one path component: `/`, `%` and characters ZooKeeper
/// forbids are percent-encoded, so `a/b` and `a` are different nodes, and a
/// name made only of dots is encoded entirely.
pub(crate) fn escape_name(name: &str) -> String {
    let all_dots = name.chars().all(|c| c == '.');
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '/' || c == '%' || is_forbidden_char(c) || all_dots {
            let mut buf = [0u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The start of every node name of one acquisition: `_c_{guid}-`.
pub(crate) fn guid_marker(guid: &Uuid) -> String {
    format!("_c_{guid}-")
}

/// The path prefix passed to a sequential `create`: `{dir}/_c_{guid}-lock-`.
pub(crate) fn node_prefix(dir: &str, guid: &Uuid, space: Space) -> String {
    format!("{dir}/{}{}", guid_marker(guid), space.marker())
}

/// The sequence number of a contender node, or `None` for any other child.
pub(crate) fn sequence_of(child: &str, space: Space) -> Option<i64> {
    let rest = child.strip_prefix("_c_")?;
    let (guid, rest) = rest.split_at_checked(36)?;
    Uuid::parse_str(guid).ok()?;
    let digits = rest.strip_prefix('-')?.strip_prefix(space.marker())?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The contender nodes among `children`, in queue order (lowest sequence first).
pub(crate) fn queue_order(children: Vec<String>, space: Space) -> Vec<String> {
    let mut queue: Vec<(i64, String)> = children
        .into_iter()
        .filter_map(|child| sequence_of(&child, space).map(|seq| (seq, child)))
        .collect();
    queue.sort_unstable();
    queue.into_iter().map(|(_, child)| child).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::ErrorKind;

    #[test]
    fn names_map_to_one_distinct_component() {
        assert_eq!(escape_name("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(escape_name("100%"), "100%25");
        assert_eq!(escape_name(".."), "%2E%2E");
        assert_eq!(escape_name("a.b"), "a.b");
        assert_eq!(escape_name("ünï 名前"), "ünï 名前");
        assert_eq!(escape_name("\u{e000}"), "%EE%80%80");
        assert_ne!(escape_name("a/b"), escape_name("a%2Fb"));
        assert_eq!(escape_name("a🔒"), "a%F0%9F%94%92");
        assert_eq!(escape_name("\u{10ffff}"), "%F4%8F%BF%BF");
        assert_ne!(escape_name("🔒"), escape_name("%F0%9F%94%92"));
        assert!(!escape_name("🔒🔑").chars().any(is_forbidden_char));
    }

    #[test]
    fn layout_validates_the_root() {
        let layout = Layout::new("/chroot/locks/").unwrap();
        assert_eq!(layout.root(), "/chroot/locks");
        assert_eq!(layout.space_dir(Space::Lock), "/chroot/locks/locks");
        let name = LockName::new("a/b").unwrap();
        assert_eq!(
            layout.name_dir(Space::Election, &name),
            "/chroot/locks/elections/a%2Fb"
        );
        assert_eq!(Layout::new("/").unwrap().space_dir(Space::Lock), "/locks");
        for bad in ["relative", "/a//b", "/a/../b", "/a/./b", "/a\u{1}", "/🔒"] {
            let err = Layout::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad:?}");
        }
    }

    #[test]
    fn queue_orders_contenders_by_sequence_and_skips_strangers() {
        let guid = Uuid::new_v4();
        let node = |seq: u32| format!("{}lock-{seq:010}", guid_marker(&guid));
        let children = vec![
            node(12),
            "%probe-x".to_owned(),
            node(3),
            format!("{}latch-0000000001", guid_marker(&guid)),
            node(7),
        ];
        assert_eq!(
            queue_order(children, Space::Lock),
            vec![node(3), node(7), node(12)]
        );
        assert_eq!(sequence_of(&node(42), Space::Lock), Some(42));
        assert_eq!(sequence_of("_c_short-lock-1", Space::Lock), None);
    }
}
