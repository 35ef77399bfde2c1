//! Where locks live in the ZooKeeper tree, and how contender nodes are named.
//!
//! The default layout ([`NodeLayout::Distlock`]) keeps every lock under one root:
//!
//! ```text
//! {root}/locks/{escaped name}/_c_{guid}-lock-{sequence}       one node per contender
//! {root}/elections/{escaped name}/_c_{guid}-latch-{sequence}  one node per candidate
//! {root}/semaphores/{escaped name}/_c_{guid}-permit-{sequence}  one node per permit
//! {root}/rwlocks/{escaped name}/_c_{guid}-read-{sequence}       one node per reader
//! {root}/rwlocks/{escaped name}/_c_{guid}-write-{sequence}      one node per writer
//! ```
//!
//! The Curator layout ([`NodeLayout::Curator`]) takes the lock name as the
//! ZooKeeper path that Apache Curator's `InterProcessMutex` or `LeaderLatch`
//! is given, and puts the same nodes directly in it:
//!
//! ```text
//! {name}/_c_{guid}-lock-{sequence}    an InterProcessMutex contender
//! {name}/_c_{guid}-latch-{sequence}   a LeaderLatch candidate
//! ```
//!
//! Semaphore and read-write lock nodes (`permit-`, `read-`, `write-`) go in
//! the same per-name directory there; each space reads only its own
//! markers, so they stay apart from the lock and the election of that path.
//!
//! The per-name directory is a container node (the server deletes it once it
//! is empty). The GUID makes each acquisition's node recognisable after a
//! connection loss during `create` (Curator's "protected" names).

use std::fmt;
use std::str::FromStr;

pub(crate) use distlock_core::raw::Space;
use distlock_core::{Error, LockName, Result};
use serde::Deserialize;
use uuid::Uuid;
use zookeeper_client as zk;

/// Where lock and election nodes go: distlock's own tree, or the paths of
/// Apache Curator's recipes, so that both can share locks and elections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeLayout {
    /// `{prefix}/locks/{name}` and `{prefix}/elections/{name}`, any lock name.
    #[default]
    Distlock,
    /// The lock name is an absolute ZooKeeper path such as `/app/locks/orders`,
    /// used as Curator's `InterProcessMutex` and `LeaderLatch` use it. The
    /// prefix does not apply.
    Curator,
}

impl NodeLayout {
    /// Every layout, by the name the URL and config use.
    pub const ALL: [NodeLayout; 2] = [NodeLayout::Distlock, NodeLayout::Curator];

    /// The name the URL and config use.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeLayout::Distlock => "distlock",
            NodeLayout::Curator => "curator",
        }
    }
}

impl fmt::Display for NodeLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeLayout {
    type Err = Error;

    /// `distlock` or `curator`; anything else is `InvalidConfig` listing them.
    fn from_str(s: &str) -> Result<Self> {
        NodeLayout::ALL
            .into_iter()
            .find(|layout| layout.as_str() == s)
            .ok_or_else(|| {
                Error::invalid_config(format!(
                    "unknown ZooKeeper layout {s:?}; known: distlock, curator"
                ))
            })
    }
}

/// The roles whose nodes queue in `space`.
fn roles(space: Space) -> &'static [Role] {
    match space {
        Space::Lock => &[Role::Lock],
        Space::Election => &[Role::Latch],
        Space::Semaphore => &[Role::Permit],
        Space::RwLock => &[Role::Read, Role::Write],
    }
}

/// What one queue node asks for, named by the marker between the GUID and
/// the sequence number. A read-write lock's readers and writers share one
/// queue, ordered by the sequence number across both markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Lock,
    Latch,
    Permit,
    Read,
    Write,
}

impl Role {
    /// The space this role's nodes queue in.
    pub(crate) fn space(self) -> Space {
        match self {
            Role::Lock => Space::Lock,
            Role::Latch => Space::Election,
            Role::Permit => Space::Semaphore,
            Role::Read | Role::Write => Space::RwLock,
        }
    }

    fn marker(self) -> &'static str {
        match self {
            Role::Lock => "lock-",
            Role::Latch => "latch-",
            Role::Permit => "permit-",
            Role::Read => "read-",
            Role::Write => "write-",
        }
    }
}

/// The validated layout and the paths derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Everything under one lock root: absolute, without a trailing slash;
    /// empty for `/`.
    Distlock { root: String },
    /// Each name is its own absolute path.
    Curator,
}

impl Layout {
    /// Validates `prefix` as an absolute ZooKeeper path for the distlock
    /// layout. With the Curator layout names are whole paths, so a prefix
    /// other than the default or `/` is refused rather than ignored.
    pub(crate) fn new(kind: NodeLayout, prefix: &str) -> Result<Self> {
        match kind {
            NodeLayout::Distlock => Self::distlock(prefix),
            NodeLayout::Curator if prefix == crate::config::DEFAULT_PREFIX || prefix == "/" => {
                Ok(Layout::Curator)
            }
            NodeLayout::Curator => Err(Error::invalid_config(format!(
                "zk lock root {prefix:?} does not apply with layout=curator: each lock name is \
                 the full ZooKeeper path Curator uses (such as /app/locks/orders); remove the \
                 URL path or prefix setting"
            ))),
        }
    }

    fn distlock(prefix: &str) -> Result<Self> {
        if !prefix.starts_with('/') {
            return Err(Error::invalid_config(format!(
                "zk lock root {prefix:?} must be an absolute path such as /distlock"
            )));
        }
        let root = prefix.trim_end_matches('/');
        if let Some(problem) = PathProblem::of(root) {
            return Err(Error::invalid_config(format!(
                "zk lock root {prefix:?} contains {}",
                problem.describe()
            )));
        }
        Ok(Layout::Distlock {
            root: root.to_owned(),
        })
    }

    /// The lock root as given (`/` for the tree's root, and for the Curator
    /// layout, whose names start there).
    pub(crate) fn root(&self) -> &str {
        match self {
            Layout::Distlock { root } if !root.is_empty() => root,
            _ => "/",
        }
    }

    /// `{root}/locks` or `{root}/elections`, created and checked at connect
    /// time; none with the Curator layout, where every name has its own path.
    pub(crate) fn space_dir(&self, space: Space) -> Option<String> {
        match self {
            Layout::Distlock { root } => Some(format!("{root}/{}", space.dir())),
            Layout::Curator => None,
        }
    }

    /// The directory holding the contenders of one name. Fails with
    /// `InvalidConfig` for a name the layout cannot map (before any I/O).
    pub(crate) fn name_dir(&self, space: Space, name: &LockName) -> Result<String> {
        match self {
            Layout::Distlock { root } => Ok(format!(
                "{root}/{}/{}",
                space.dir(),
                escape_name(name.as_str())
            )),
            Layout::Curator => curator_path(name).map(str::to_owned),
        }
    }

    /// What to create when `dir` cannot be created because its parent is
    /// missing: the distlock layout's `{root}/locks` (persistent, with its
    /// ancestors), or, like Curator's `creatingParentContainersIfNeeded`,
    /// every ancestor of a Curator path as a container. `None` at the top.
    pub(crate) fn parent_of(&self, space: Space, dir: &str) -> Option<(String, zk::CreateMode)> {
        match self {
            Layout::Distlock { .. } => self
                .space_dir(space)
                .map(|parent| (parent, zk::CreateMode::Persistent)),
            Layout::Curator => match dir.rsplit_once('/') {
                Some((parent, _)) if !parent.is_empty() => {
                    Some((parent.to_owned(), zk::CreateMode::Container))
                }
                _ => None,
            },
        }
    }
}

/// Something a ZooKeeper path must not contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathProblem {
    EmptySegment,
    DotSegment,
    ForbiddenChar,
}

impl PathProblem {
    /// The first problem among the components of an absolute path.
    fn of(path: &str) -> Option<Self> {
        path.split('/').skip(1).find_map(|segment| match segment {
            "" => Some(PathProblem::EmptySegment),
            "." | ".." => Some(PathProblem::DotSegment),
            s if s.chars().any(is_forbidden_char) => Some(PathProblem::ForbiddenChar),
            _ => None,
        })
    }

    fn describe(self) -> &'static str {
        match self {
            PathProblem::EmptySegment => "an empty component (//)",
            PathProblem::DotSegment => "a . or .. component",
            PathProblem::ForbiddenChar => {
                "a character ZooKeeper forbids (a control, U+E000..U+F8FF, U+FFF0..U+FFFF, or \
                 anything outside the Basic Multilingual Plane)"
            }
        }
    }
}

/// A lock name as a Curator recipe path: an absolute ZooKeeper path that
/// the server accepts, naming a node that the recipe's nodes go into.
fn curator_path(name: &LockName) -> Result<&str> {
    let path = name.as_str();
    let bad = |rule: &str| {
        Error::invalid_config(format!("zk lock name {path:?} with layout=curator {rule}"))
    };
    if !path.starts_with('/') {
        return Err(bad(
            "must be an absolute ZooKeeper path starting with /, such as /app/locks/orders",
        ));
    }
    if path.ends_with('/') {
        return Err(bad(
            "must not end with / (the recipe's nodes go inside the named node)",
        ));
    }
    if let Some(problem) = PathProblem::of(path) {
        return Err(bad(&format!("must not contain {}", problem.describe())));
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return Err(bad(
            "must not be under /zookeeper, which ZooKeeper reserves",
        ));
    }
    Ok(path)
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

/// The path prefix passed to a sequential `create`: `{dir}/_c_{guid}-lock-`
/// (or the marker of another role).
pub(crate) fn node_prefix(dir: &str, guid: &Uuid, role: Role) -> String {
    format!("{dir}/{}{}", guid_marker(guid), role.marker())
}

/// The sequence number and role of a contender node of `space`, or `None`
/// for any other child.
pub(crate) fn entry_of(child: &str, space: Space) -> Option<(i64, Role)> {
    let rest = child.strip_prefix("_c_")?;
    let (guid, rest) = rest.split_at_checked(36)?;
    Uuid::parse_str(guid).ok()?;
    let rest = rest.strip_prefix('-')?;
    let (role, digits) = roles(space)
        .iter()
        .find_map(|role| Some((*role, rest.strip_prefix(role.marker())?)))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, role))
}

/// The sequence number of a contender node, or `None` for any other child.
pub(crate) fn sequence_of(child: &str, space: Space) -> Option<i64> {
    entry_of(child, space).map(|(sequence, _)| sequence)
}

/// The contender nodes among `children`, in queue order (lowest sequence
/// first, across the roles of the space).
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
    use distlock_core::ErrorKind;

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
        let distlock = |prefix| Layout::new(NodeLayout::Distlock, prefix);
        let layout = distlock("/chroot/locks/").unwrap();
        assert_eq!(layout.root(), "/chroot/locks");
        assert_eq!(
            layout.space_dir(Space::Lock).unwrap(),
            "/chroot/locks/locks"
        );
        let name = LockName::new("a/b").unwrap();
        assert_eq!(
            layout.name_dir(Space::Election, &name).unwrap(),
            "/chroot/locks/elections/a%2Fb"
        );
        assert_eq!(
            distlock("/").unwrap().space_dir(Space::Lock).unwrap(),
            "/locks"
        );
        for bad in ["relative", "/a//b", "/a/../b", "/a/./b", "/a\u{1}", "/🔒"] {
            let err = distlock(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad:?}");
        }
    }

    #[test]
    fn curator_names_are_the_recipe_paths() {
        let layout = Layout::new(NodeLayout::Curator, "/distlock").unwrap();
        assert_eq!(Layout::new(NodeLayout::Curator, "/").unwrap(), layout);
        assert_eq!(layout.root(), "/");
        assert_eq!(layout.space_dir(Space::Lock), None);
        for space in [Space::Lock, Space::Election] {
            let name = LockName::new("/app/locks/orders").unwrap();
            assert_eq!(layout.name_dir(space, &name).unwrap(), "/app/locks/orders");
        }
        assert_eq!(
            layout.parent_of(Space::Lock, "/app/locks/orders"),
            Some(("/app/locks".to_owned(), zk::CreateMode::Container))
        );
        assert_eq!(layout.parent_of(Space::Lock, "/top"), None);
        let err = Layout::new(NodeLayout::Curator, "/chroot").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("layout=curator"), "{err}");
    }

    #[test]
    fn curator_paths_pass_or_name_the_rule() {
        let layout = Layout::Curator;
        // Each path with the rule it breaks; `None`: a good path, its own dir.
        let cases = [
            ("orders", Some("must be an absolute ZooKeeper path")),
            ("/", Some("must not end with /")),
            ("/app/", Some("must not end with /")),
            ("/app//orders", Some("empty component")),
            ("/app/./orders", Some(". or .. component")),
            ("/app/..", Some(". or .. component")),
            ("/app/\u{e000}", Some("character ZooKeeper forbids")),
            ("/app/🔒", Some("character ZooKeeper forbids")),
            ("/zookeeper", Some("reserves")),
            ("/zookeeper/quota/x", Some("reserves")),
            ("/a", None),
            ("/app/locks/x.y", None),
            ("/zookeeper-not/x", None),
            ("/ünï 名前", None),
        ];
        for (path, broken) in cases {
            let name = LockName::new(path).unwrap();
            let dir = layout.name_dir(Space::Lock, &name);
            let Some(rule) = broken else {
                assert_eq!(dir.unwrap(), path);
                continue;
            };
            let err = dir.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{path:?}");
            assert!(err.message().contains(rule), "{path:?}: {err}");
        }
    }

    #[test]
    fn layout_names_parse_and_unknown_ones_list_the_known() {
        assert_eq!(
            "curator".parse::<NodeLayout>().unwrap(),
            NodeLayout::Curator
        );
        assert_eq!(
            "distlock".parse::<NodeLayout>().unwrap(),
            NodeLayout::Distlock
        );
        assert_eq!(NodeLayout::default(), NodeLayout::Distlock);
        let err = "concurrency".parse::<NodeLayout>().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.message().contains("\"concurrency\"")
                && err.message().contains("distlock, curator"),
            "{err}"
        );
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

    #[test]
    fn readers_and_writers_share_one_order_apart_from_other_spaces() {
        let guid = Uuid::new_v4();
        let node = |marker: &str, seq: u32| format!("{}{marker}{seq:010}", guid_marker(&guid));
        let children = vec![
            node("write-", 5),
            node("read-", 2),
            node("permit-", 1),
            node("lock-", 3),
            node("read-", 9),
        ];
        assert_eq!(
            queue_order(children.clone(), Space::RwLock),
            vec![node("read-", 2), node("write-", 5), node("read-", 9)]
        );
        assert_eq!(
            queue_order(children, Space::Semaphore),
            vec![node("permit-", 1)]
        );
        assert_eq!(
            entry_of(&node("write-", 5), Space::RwLock),
            Some((5, Role::Write))
        );
        assert_eq!(entry_of(&node("write-", 5), Space::Lock), None);
        assert!(node_prefix("/d", &guid, Role::Permit).ends_with("-permit-"));
    }
}
