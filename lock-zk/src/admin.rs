//! The operator's view, read from the contender nodes themselves: who
//! holds a name and who waits (`inspect`), which names have nodes
//! (`list`), and breaking a lock by deleting its holder's node
//! (`force_release`).
//!
//! Each node's data is its description (a lock's holder label, an
//! election's value), its `czxid` the token and its `ctime` when it was
//! created. Reads `sync` the directory first, so that the server we ask
//! has applied what the leader committed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_core::WaiterInfo;
use distlock_core::{
    ErrorKind, FencingToken, HolderInfo, ListOptions, ListPage, ListedLock, LockName, LockStatus,
    Primitive, Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::errors::{ZkSite, in_doubt};
use crate::keys::{Layout, Space, escape_name, queue_order, sequence_of};
use crate::session::Session;
use distlock_core::raw::Site;

/// How often a read or delete is tried again after an in-doubt failure.
const ATTEMPTS: usize = 8;

/// How many directories one listing step reads at once (pipelined).
const BATCH: usize = 64;

/// One contender node: its path, data and stat.
struct Contender {
    path: String,
    data: Vec<u8>,
    stat: zk::Stat,
}

impl Contender {
    fn token(&self) -> FencingToken {
        FencingToken(u64::try_from(self.stat.czxid).unwrap_or_default())
    }

    /// The node's data as text; `None` when empty (a node of a client that
    /// stores nothing).
    fn description(&self) -> Option<String> {
        (!self.data.is_empty()).then(|| String::from_utf8_lossy(&self.data).into_owned())
    }

    fn holder(&self) -> HolderInfo {
        HolderInfo {
            key: self.path.clone(),
            token: self.token(),
            description: self.description(),
            acquired_at: u64::try_from(self.stat.ctime)
                .ok()
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            lease_left: None,
        }
    }

    fn waiter(&self) -> WaiterInfo {
        WaiterInfo {
            key: Some(self.path.clone()),
            description: self.description(),
        }
    }
}

/// The queue of `dir` in order, each node with its data. Nodes that went
/// away between the listing and their read are left out, and so is a
/// second node of one acquisition (same GUID, left by an in-doubt
/// `create`): it is not another waiter. A missing directory is an empty
/// queue. Two round trips: `sync` + `getChildren`, then every `getData`.
async fn read_queue(
    session: &Session,
    dir: &str,
    space: Space,
) -> Result<Vec<Contender>, zk::Error> {
    let synced = session.client.sync(dir);
    let listed = session.client.list_children(dir);
    match session.call(synced).await {
        Ok(()) | Err(zk::Error::NoNode) => {}
        Err(e) => return Err(e),
    }
    let children = match session.call(listed).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut guids = BTreeSet::new();
    let paths: Vec<String> = queue_order(children, space)
        .into_iter()
        .filter(|child| guids.insert(child.get(..40).unwrap_or(child).to_owned()))
        .map(|child| format!("{dir}/{child}"))
        .collect();
    let reads: Vec<_> = paths.iter().map(|p| session.client.get_data(p)).collect();
    let mut queue = Vec::with_capacity(paths.len());
    for (path, read) in paths.into_iter().zip(reads) {
        match session.call(read).await {
            Ok((data, stat)) => queue.push(Contender { path, data, stat }),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(queue)
}

/// The attempts of one operator action: a live session for each, and a
/// wait for the connection after each in-doubt failure.
struct Attempts<'a> {
    backend: &'a ZkBackend,
    doing: Site<'a>,
    left: usize,
}

impl<'a> Attempts<'a> {
    fn new(backend: &'a ZkBackend, action: &'a str) -> Self {
        Attempts {
            backend,
            doing: crate::errors::doing(action, &backend.settings().connect_string),
            left: ATTEMPTS,
        }
    }

    /// The session for the next attempt; `None` once all are used.
    async fn next(&mut self) -> Result<Option<Arc<Session>>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        self.backend.session().await.map(Some)
    }

    /// After `e` failed an attempt on `session`: the action's error, unless
    /// `e` left the outcome in doubt and the connection came back, so that
    /// the next attempt may follow.
    async fn failed(&self, session: &Session, e: zk::Error) -> Result<()> {
        if !in_doubt(&e) {
            return Err(self.doing.client_error(e));
        }
        session
            .wait_connected(Instant::now() + session.timing.request)
            .await
            .map_err(|e| self.doing.client_error(e))
    }

    /// The error once every attempt is used: `why` says what kept failing.
    fn exhausted(&self, why: impl std::fmt::Display) -> distlock_core::Error {
        self.doing.error(ErrorKind::Unavailable, why)
    }
}

/// Runs `step` on the live session until it is answered, waiting for the
/// connection after each in-doubt failure; other failures are errors of
/// `action`.
async fn answered<T, F>(
    backend: &ZkBackend,
    action: &str,
    mut step: impl FnMut(Arc<Session>) -> F,
) -> Result<T>
where
    F: Future<Output = Result<T, zk::Error>>,
{
    let mut attempts = Attempts::new(backend, action);
    while let Some(session) = attempts.next().await? {
        match step(session.clone()).await {
            Ok(answer) => return Ok(answer),
            Err(e) => attempts.failed(&session, e).await?,
        }
    }
    Err(attempts.exhausted(format!(
        "no answer after {ATTEMPTS} attempts; is the ensemble reachable?"
    )))
}

/// The spaces a name is looked up in by `inspect` and `force_release`, in
/// order: its lock, then its election, so an operator names either.
const OPERATED: [Space; 2] = [Space::Lock, Space::Election];

/// See [`distlock_core::LockBackend::inspect`]: the lock's queue, or the
/// election's when the lock has no contenders.
pub(crate) async fn inspect(backend: &ZkBackend, name: &LockName) -> Result<LockStatus> {
    for space in OPERATED {
        if let Some(status) = inspect_in(backend, space, name).await? {
            return Ok(status);
        }
    }
    Ok(LockStatus::free(name.clone()))
}

/// The status of `name` in `space`; `None` when it has no contenders.
async fn inspect_in(
    backend: &ZkBackend,
    space: Space,
    name: &LockName,
) -> Result<Option<LockStatus>> {
    let dir = backend.settings().layout.name_dir(space, name)?;
    let primitive = primitive_of(space);
    let action = format!("inspecting {} {name}", primitive.as_str());
    let dir = &dir;
    let queue = answered(backend, &action, |session| async move {
        read_queue(&session, dir, space).await
    })
    .await?;
    let mut nodes = queue.iter();
    let Some(head) = nodes.next() else {
        return Ok(None);
    };
    let waiters: Vec<WaiterInfo> = nodes.map(Contender::waiter).collect();
    Ok(Some(LockStatus {
        name: name.clone(),
        primitive,
        holder: Some(head.holder()),
        waiting: waiters.len(),
        waiters,
    }))
}

fn primitive_of(space: Space) -> Primitive {
    match space {
        Space::Lock => Primitive::Lock,
        Space::Election => Primitive::Election,
        Space::Semaphore => Primitive::Semaphore,
        Space::RwLock => Primitive::RwLock,
    }
}

/// What one attempt at breaking a lock found.
enum Break {
    /// Nobody holds it.
    Free,
    /// This holder's node was deleted (by us, or it left as we deleted).
    Evicted(HolderInfo),
    /// The holder we saw left before our delete: look again.
    Moved,
}

/// See [`distlock_core::LockBackend::force_release`]. Deleting needs DELETE on
/// the lock's directory: with digest credentials, only the identity that
/// created the directory has it.
pub(crate) async fn force_release(
    backend: &ZkBackend,
    name: &LockName,
) -> Result<Option<HolderInfo>> {
    for space in OPERATED {
        if let Some(evicted) = force_release_in(backend, space, name).await? {
            return Ok(Some(evicted));
        }
    }
    Ok(None)
}

/// Breaks `name` in `space`: deletes its head node.
async fn force_release_in(
    backend: &ZkBackend,
    space: Space,
    name: &LockName,
) -> Result<Option<HolderInfo>> {
    let dir = backend.settings().layout.name_dir(space, name)?;
    let noun = primitive_of(space).as_str();
    let action = format!("breaking {noun} {name}");
    let mut attempts = Attempts::new(backend, &action);
    // A delete whose outcome we did not learn: if its node is gone when we
    // look again, that holder was evicted.
    let mut in_doubt_of: Option<HolderInfo> = None;
    while let Some(session) = attempts.next().await? {
        match break_once(&session, space, &dir, &mut in_doubt_of).await {
            Ok(Break::Free) => return Ok(None),
            Ok(Break::Evicted(holder)) => {
                tracing::info!(lock = %name, space = noun, node = %holder.key, token = holder.token.get(), "zk lock broken: the holder's node is deleted");
                return Ok(Some(holder));
            }
            Ok(Break::Moved) => {}
            Err(zk::Error::NoAuth) => {
                return Err(attempts.doing.error(
                    ErrorKind::Unauthorized,
                    format!(
                        "{} may not delete nodes in {dir}: its ACL lets only the identity that \
                         created it delete; break the lock with that username",
                        backend.settings().identity()
                    ),
                ));
            }
            Err(e) => attempts.failed(&session, e).await?,
        }
    }
    Err(attempts.exhausted(format!(
        "the holder kept changing, or the server did not answer, in {ATTEMPTS} attempts; retry"
    )))
}

async fn break_once(
    session: &Session,
    space: Space,
    dir: &str,
    in_doubt_of: &mut Option<HolderInfo>,
) -> Result<Break, zk::Error> {
    let queue = read_queue(session, dir, space).await?;
    let head = queue.first();
    if let Some(sent) = in_doubt_of.take()
        && head.is_none_or(|head| head.path != sent.key)
    {
        return Ok(Break::Evicted(sent));
    }
    let Some(head) = head else {
        return Ok(Break::Free);
    };
    let holder = head.holder();
    match session.call(session.client.delete(&head.path, None)).await {
        Ok(()) => Ok(Break::Evicted(holder)),
        Err(zk::Error::NoNode) => Ok(Break::Moved),
        Err(e) => {
            if in_doubt(&e) {
                *in_doubt_of = Some(holder);
            }
            Err(e)
        }
    }
}

/// A name's directory found by a listing, to be probed for contenders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    primitive: Primitive,
    name: LockName,
    dir: String,
}

/// See [`distlock_core::LockBackend::list`].
pub(crate) async fn list(backend: &ZkBackend, options: &ListOptions) -> Result<ListPage> {
    let layout = backend.settings().layout.clone();
    let action = match layout {
        Layout::Distlock { .. } => format!("listing locks under {:?}", options.prefix),
        Layout::Curator => format!("listing Curator paths under {:?}", options.prefix),
    };
    let layout = &layout;
    let mut candidates: Vec<Candidate> = answered(backend, &action, |session| async move {
        match layout {
            Layout::Distlock { .. } => distlock_names(&session, layout).await,
            Layout::Curator => curator_paths(&session, &options.prefix).await,
        }
    })
    .await?
    .into_iter()
    .filter(|c| options.admits(c.primitive, &c.name))
    .collect();
    candidates.sort();
    candidates.dedup();
    let mut found = Vec::new();
    for batch in candidates.chunks(BATCH) {
        let probed = answered(backend, &action, |session| async move {
            let reads = batch
                .iter()
                .map(|c| read_queue(&session, &c.dir, space_of(c.primitive)));
            futures::future::join_all(reads)
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
        for (candidate, queue) in batch.iter().zip(probed) {
            if let Some(head) = queue.first() {
                found.push(ListedLock {
                    name: candidate.name.clone(),
                    primitive: candidate.primitive,
                    holder_token: Some(head.token()),
                    waiting: queue.len() - 1,
                });
            }
        }
        if found.len() > options.limit {
            break;
        }
    }
    Ok(options.page(found))
}

fn space_of(primitive: Primitive) -> Space {
    match primitive {
        Primitive::Election => Space::Election,
        _ => Space::Lock,
    }
}

/// The names under `{root}/locks` and `{root}/elections`: each child is
/// one escaped name (see [`escape_name`]). Children that are not the
/// escape of a valid name are someone else's and skipped.
async fn distlock_names(session: &Session, layout: &Layout) -> Result<Vec<Candidate>, zk::Error> {
    let mut names = Vec::new();
    for (space, primitive) in [
        (Space::Lock, Primitive::Lock),
        (Space::Election, Primitive::Election),
    ] {
        let Some(base) = layout.space_dir(space) else {
            continue;
        };
        let children = match session.call(session.client.list_children(&base)).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(e),
        };
        names.extend(children.into_iter().filter_map(|child| {
            let name = unescape_name(&child)?;
            Some(Candidate {
                primitive,
                dir: format!("{base}/{child}"),
                name,
            })
        }));
    }
    Ok(names)
}

/// The lock name whose directory is `child`, if `child` is exactly what
/// [`escape_name`] makes of it.
fn unescape_name(child: &str) -> Option<LockName> {
    let text = distlock_core::raw::percent_decode(child).ok()?;
    (escape_name(&text) == child)
        .then(|| LockName::new(text).ok())
        .flatten()
}

/// With the Curator layout names are paths: walks the tree below the
/// deepest path the prefix names (the whole tree for an empty prefix, but
/// never `/zookeeper`), and reports each node that has contender nodes
/// (`_c_<guid>-lock-<seq>` or `-latch-`) as a lock or election. One
/// `getChildren` per node visited, a level at a time (pipelined).
async fn curator_paths(session: &Session, prefix: &str) -> Result<Vec<Candidate>, zk::Error> {
    let Some(start) = walk_start(prefix) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    let mut level = vec![start];
    while !level.is_empty() {
        let listings: Vec<_> = level
            .iter()
            .map(|path| session.call(session.client.list_children(path)))
            .collect();
        let listings = futures::future::join_all(listings).await;
        let mut next = Vec::new();
        for (path, listing) in level.iter().zip(listings) {
            let children = match listing {
                Ok(children) => children,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(e),
            };
            for (space, primitive) in [
                (Space::Lock, Primitive::Lock),
                (Space::Election, Primitive::Election),
            ] {
                if children.iter().any(|c| sequence_of(c, space).is_some()) {
                    found.extend(LockName::new(path.as_str()).ok().map(|name| Candidate {
                        primitive,
                        name,
                        dir: path.clone(),
                    }));
                }
            }
            for child in children {
                let contender = Space::ALL
                    .iter()
                    .any(|space| sequence_of(&child, *space).is_some());
                let child = match path.as_str() {
                    "/" => format!("/{child}"),
                    parent => format!("{parent}/{child}"),
                };
                if !contender && child != "/zookeeper" && on_the_way(&child, prefix) {
                    next.push(child);
                }
            }
        }
        level = next;
    }
    Ok(found)
}

/// Where a walk for names starting with `prefix` begins: the deepest node
/// the prefix names whole (`/app/locks` for `/app/locks/ord`); `None` for a
/// relative prefix, which no Curator path matches.
fn walk_start(prefix: &str) -> Option<String> {
    if prefix.is_empty() {
        return Some("/".to_owned());
    }
    if !prefix.starts_with('/') {
        return None;
    }
    let (parent, _) = prefix.rsplit_once('/')?;
    Some(if parent.is_empty() { "/" } else { parent }.to_owned())
}

/// Whether the walk must visit `path`: it is under the prefix, or the
/// prefix is under it.
fn on_the_way(path: &str, prefix: &str) -> bool {
    path.starts_with(prefix) || prefix.starts_with(&format!("{path}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_escapes_are_names() {
        for name in ["a", "jobs/nightly", "100%", "..", "a🔒"] {
            let child = escape_name(name);
            assert_eq!(unescape_name(&child).unwrap().as_str(), name, "{child}");
        }
        for stranger in ["%41", "%probe-1", "%zz", "%0A"] {
            assert_eq!(unescape_name(stranger), None, "{stranger}");
        }
    }

    #[test]
    fn curator_walks_start_at_the_deepest_named_node() {
        assert_eq!(walk_start("").as_deref(), Some("/"));
        assert_eq!(walk_start("/").as_deref(), Some("/"));
        assert_eq!(walk_start("/app").as_deref(), Some("/"));
        assert_eq!(walk_start("/app/").as_deref(), Some("/app"));
        assert_eq!(walk_start("/app/locks/ord").as_deref(), Some("/app/locks"));
        assert_eq!(walk_start("app"), None);
        assert!(on_the_way("/app", "/app/locks/"));
        assert!(on_the_way("/app/locks/orders", "/app/locks/"));
        assert!(!on_the_way("/apple", "/app/locks/"));
        assert!(!on_the_way("/other", "/app/"));
    }
}
