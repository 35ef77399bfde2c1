//! The queue recipe: join with a protected ephemeral-sequential node, then
//! wait until the entries ahead of it let it in (see [`crate::ahead`]: for
//! a lock or an election, until it is the lowest), watching only the nodes
//! that block it.
//!
//! Round trips: `create` and `getChildren` are pipelined (ZooKeeper runs a
//! session's requests in order, so the listing already contains our node),
//! so an uncontended acquisition costs one round trip. A waiter sets
//! `getData` watches on its blockers (pipelined) and, when one fires, drops
//! that node from its view of the queue ahead and applies the rule again:
//! if that grants it (nothing joins the nodes ahead of ours, and fewer
//! never grant less) it is granted once an `exists` confirms that its own
//! node is still there; otherwise it lists the children again. A release
//! wakes only the waiters it can let in, and a hand-over costs one round
//! trip beyond the release itself.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;

use distlock_core::raw::LossNotifier;
use distlock_core::{Error, ErrorKind, LostReason, Result, Wait};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;
use uuid::Uuid;
use zookeeper_client as zk;

use crate::ahead::{Ahead, Ask};
use crate::cleanup::AcquireCleanup;
use crate::deadline::Deadline;
use crate::errors::{ZkSite, in_doubt};
use crate::held::watch_own_node;
use crate::keys::{Layout, Space, guid_marker, node_prefix, queue_order};
use crate::session::Session;
use distlock_core::raw::Site;

/// How often an operation is retried after in-doubt failures before giving
/// up, when the caller's deadline does not end the retries sooner.
const ATTEMPTS: usize = 8;

/// Our node once it heads the queue, with the watch on it already armed.
#[derive(Debug)]
pub(crate) struct Head {
    /// Fired when our node goes away (set up at creation).
    pub(crate) notifier: LossNotifier,
    /// The task watching our node.
    pub(crate) watcher: JoinHandle<()>,
    /// Where the watcher learns the hold id once registered.
    pub(crate) hold: Arc<OnceLock<u64>>,
    /// The node's absolute path.
    pub(crate) path: String,
    /// The node's creation zxid: the fencing token.
    pub(crate) czxid: i64,
    /// Set when a `create` was in doubt: a late second node of ours may
    /// still appear, and is looked for and deleted after the release.
    pub(crate) duplicates: Option<AcquireCleanup>,
}

/// A queue node that must be deleted unless the acquisition succeeds.
///
/// Dropping it while armed (an error, a timeout, or a cancelled future)
/// sends the delete at once, or looks the node up by its GUID if the
/// `create` reply never came, and retries in the background.
struct PendingNode {
    session: Arc<Session>,
    dir: String,
    marker: String,
    path: Option<String>,
    /// Watching our node; detached when dropped.
    watcher: Option<JoinHandle<()>>,
    /// Ends the watcher before it arms its watch.
    notifier: Option<LossNotifier>,
    /// A `create` was in doubt: more nodes of ours may exist.
    doubtful: bool,
    armed: bool,
}

impl PendingNode {
    fn by_guid(&self) -> AcquireCleanup {
        AcquireCleanup::Guid {
            dir: self.dir.clone(),
            marker: self.marker.clone(),
        }
    }

    fn acquire_cleanup(&self) -> AcquireCleanup {
        match &self.path {
            Some(path) => AcquireCleanup::Node(path.clone()),
            None => self.by_guid(),
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes our node now and waits for it, until `until` at the latest:
    /// an acquisition that gives up has left the queue when it returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the deletes go on in the background.
    async fn finish(&mut self, until: Instant) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if let Some(notifier) = &self.notifier {
            notifier.fire(LostReason::Released);
        }
        let node = self.session.remove_and_wait(self.acquire_cleanup(), until);
        if self.doubtful && self.path.is_some() {
            let others = self.session.remove_and_wait(self.by_guid(), until);
            futures::join!(node, others);
        } else {
            node.await;
        }
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if self.armed {
            // An unarmed watcher stops here; an armed one ends on the
            // delete's notification.
            if let Some(notifier) = &self.notifier {
                notifier.fire(LostReason::Released);
            }
            self.session.remove_now(self.acquire_cleanup());
            if self.doubtful && self.path.is_some() {
                self.session.remove_now(self.by_guid());
            }
        }
    }
}

/// Joins the queue in `dir` (a name's directory, see
/// [`Layout::name_dir`]) and waits, as `deadline` allows, until the entries
/// ahead of our node let `ask` in (see [`crate::ahead`]). `data` is stored
/// in the node (an election's value, a holder's description). Every step
/// ends by the deadline's hard limit.
pub(crate) async fn join_and_wait(
    session: &Arc<Session>,
    layout: &Layout,
    ask: &Ask<'_>,
    dir: &str,
    data: &[u8],
    deadline: &Deadline,
    doing: &Site<'_>,
) -> Result<Head> {
    let dir = dir.to_owned();
    let guid = Uuid::new_v4();
    let marker = guid_marker(&guid);
    let mut pending = PendingNode {
        session: session.clone(),
        dir: dir.clone(),
        marker: marker.clone(),
        path: None,
        watcher: None,
        notifier: None,
        doubtful: false,
        armed: true,
    };
    // A wait that ends in an error (it ran out, the session failed) leaves
    // the queue before returning; a dropped future leaves it in the
    // background ([`PendingNode`]'s drop).
    let result: Result<Head> = async {
        let created =
            create_protected(session, layout, ask, &dir, &guid, data, deadline, doing).await?;
        pending.path = Some(created.path.clone());
        pending.doubtful = created.doubtful;
        let notifier = LossNotifier::new();
        let ours_gone = notifier.signal();
        pending.notifier = Some(notifier.clone());
        let hold = Arc::new(OnceLock::new());
        pending.watcher = Some(tokio::spawn(
            watch_own_node(
                Arc::downgrade(session),
                hold.clone(),
                created.path.clone(),
                notifier.clone(),
            )
            .in_current_span(),
        ));
        let ours = created
            .path
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut listing = created.listing;
        // Read from a listing, then shrinking as the entries we watch go (see
        // `crate::ahead`); dropped for a new listing when a departure does not
        // grant us, which also finds any second node of ours ahead of us.
        let mut ahead: Option<Ahead> = None;
        // The previous view while listing again: what it knows is not read again.
        let mut stale: Option<Ahead> = None;
        // The armed watches on entries that block us, each answering with its path.
        let mut watches = FuturesUnordered::<BoxFuture<'static, (String, zk::WatchedEvent)>>::new();
        let mut watched = HashSet::new();
        loop {
            let from_listing = ahead.is_none();
            let view = match &mut ahead {
                Some(view) => view,
                None => {
                    let children = match listing.take() {
                        Some(children) => children,
                        None => list(session, &dir, deadline, doing).await?,
                    };
                    let children = drop_duplicates(session, &dir, children, &marker, &ours);
                    let queue = queue_order(children, ask.space());
                    let Some(position) = queue.iter().position(|child| *child == ours) else {
                        pending.disarm();
                        return Err(disappeared(doing, &created.path));
                    };
                    let known = stale.take();
                    let ahead_of_us = &queue[..position];
                    let view = Ahead::read(session, &dir, ask, ahead_of_us, known, deadline, doing);
                    ahead.insert(view.await?)
                }
            };
            view.check_limits(ask, doing)?;
            let blocking = view.blockers(ask);
            if blocking.is_empty() {
                // Granted on a view that shrank since the listing: our own node
                // may have been deleted just before the last entry ahead, in the
                // same transaction even.
                if !from_listing {
                    match session
                        .call_within(deadline, session.client.check_stat(&created.path))
                        .await
                    {
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            pending.disarm();
                            return Err(disappeared(doing, &created.path));
                        }
                        Err(e) if in_doubt(&e) => {
                            if deadline.is_past() {
                                return Err(out_of_time(doing, "confirming our queue node", e));
                            }
                            reconnected(session, deadline, doing).await?;
                            continue;
                        }
                        Err(e) => return Err(doing.client_error(e)),
                    }
                }
                pending.disarm();
                return Ok(Head {
                    notifier,
                    watcher: pending.watcher.take().expect("the watcher is armed"),
                    hold,
                    path: created.path,
                    czxid: created.czxid,
                    duplicates: created.doubtful.then(|| pending.by_guid()),
                });
            }
            if deadline.give_up.is_some_and(|d| Instant::now() >= d) {
                return Err(gave_up(deadline.wait, doing));
            }
            // Watch the blockers not watched yet, their requests pipelined.
            let requests: Vec<_> = blocking
                .into_iter()
                .filter(|path| !watched.contains(path))
                .map(|path| {
                    let request = session.client.get_and_watch_data(&path);
                    (path, request)
                })
                .collect();
            let mut shrank = false;
            let mut in_doubt_error = None;
            for (path, request) in requests {
                match session.call_within(deadline, request).await {
                    Ok((_, _, watcher)) => {
                        tracing::trace!(%path, "zk waiting for a node ahead of ours");
                        watched.insert(path.clone());
                        watches.push(Box::pin(async move { (path, watcher.changed().await) }));
                    }
                    Err(zk::Error::NoNode) => {
                        view.gone(&path);
                        shrank = true;
                    }
                    Err(e) if in_doubt(&e) => in_doubt_error = Some(e),
                    Err(e) => return Err(doing.client_error(e)),
                }
            }
            if let Some(e) = in_doubt_error {
                if deadline.is_past() {
                    return Err(out_of_time(doing, "watching the nodes ahead of ours", e));
                }
                reconnected(session, deadline, doing).await?;
                continue;
            }
            if shrank {
                if !view.blockers(ask).is_empty() {
                    stale = ahead.take();
                }
                continue;
            }
            let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
            let (path, event) = tokio::select! {
                Some(fired) = watches.next() => fired,
                () = sleep_until(deadline.give_up.unwrap_or(far)) => return Err(gave_up(deadline.wait, doing)),
                reason = ours_gone.lost() => {
                    pending.disarm();
                    return Err(doing.error(ErrorKind::LeaseLost,
                        format!("our queue node {} went away while waiting ({reason}); acquire again", created.path),
                    ));
                }
            };
            watched.remove(&path);
            match event.event_type {
                zk::EventType::Session if event.session_state.is_terminated() => {
                    pending.disarm();
                    return Err(doing.client_error(state_error(event.session_state)));
                }
                zk::EventType::NodeDeleted => {
                    view.gone(&path);
                    if !view.blockers(ask).is_empty() {
                        stale = ahead.take();
                    }
                }
                // Any other change: the watch is spent, and armed again next round.
                _ => {}
            }
        }
    }
    .await;
    // The clean-up is waited for only within the caller's bound (the wait
    // plus one request timeout, which leaves it a request's time when the
    // wait ran out); past that, or for a wait without end, it goes on in
    // the background.
    if result.is_err()
        && let Some(hard) = deadline.hard()
    {
        pending.finish(hard).await;
    }
    result
}

/// The error when our node is gone before it was granted.
fn disappeared(doing: &Site<'_>, path: &str) -> Error {
    doing.error(
        ErrorKind::LeaseLost,
        format!(
            "our queue node {path} disappeared while waiting (deleted by another client, or the \
             session expired); acquire again"
        ),
    )
}

/// Deletes every other node carrying our GUID (a retried `create` whose
/// first attempt did commit, unseen by the lookup) and leaves it out of the
/// listing: a node of ours ahead of us would otherwise block the name for as
/// long as the session lives. The deletes are sent before any later request.
fn drop_duplicates(
    session: &Session,
    dir: &str,
    mut children: Vec<String>,
    marker: &str,
    ours: &str,
) -> Vec<String> {
    children.retain(|child| {
        let duplicate = child.starts_with(marker) && child != ours;
        if duplicate {
            tracing::warn!(%dir, %child, "zk deleting a second queue node of ours");
            session.remove_now(AcquireCleanup::Node(format!("{dir}/{child}")));
        }
        !duplicate
    });
    children
}

fn gave_up(wait: Wait, doing: &Site<'_>) -> Error {
    match wait {
        Wait::No => doing.error(ErrorKind::WouldBlock, "held by another client"),
        Wait::Timeout(d) => doing.error(
            ErrorKind::Timeout,
            format!(
                "still held by another client after waiting {}",
                distlock_core::raw::human_duration(d)
            ),
        ),
        Wait::Forever => doing.error(ErrorKind::Timeout, "wait ended"),
    }
}

fn state_error(state: zk::SessionState) -> zk::Error {
    match state {
        zk::SessionState::AuthFailed => zk::Error::AuthFailed,
        zk::SessionState::Closed => zk::Error::ClientClosed,
        _ => zk::Error::SessionExpired,
    }
}

/// The error when the caller's deadline ends a step whose outcome is unknown
/// (`last` is how the step failed): `Timeout` after a request timed out,
/// `Unavailable` after a connection loss.
fn out_of_time(doing: &Site<'_>, what: &str, last: zk::Error) -> Error {
    let kind = match last {
        zk::Error::Timeout => ErrorKind::Timeout,
        _ => ErrorKind::Unavailable,
    };
    doing
        .error(
            kind,
            format!(
                "{what} was not confirmed within the wait plus one request timeout ({last}); \
                 any queue node left behind is deleted in the background; retry later"
            ),
        )
        .with_source(last)
}

/// Waits (at most one request timeout, and never past the caller's
/// deadline) for the connection to come back.
async fn reconnected(session: &Session, deadline: &Deadline, doing: &Site<'_>) -> Result<()> {
    session
        .wait_connected(deadline.step(session.timing.request))
        .await
        .map_err(|e| doing.client_error(e))
}

/// A created node, and the children listing pipelined with its `create`.
struct Created {
    path: String,
    czxid: i64,
    listing: Option<Vec<String>>,
    /// Some `create` attempt was in doubt.
    doubtful: bool,
}

/// Creates our ephemeral-sequential node. After an in-doubt failure it
/// looks for our GUID before creating again, so a retry never leaves a
/// second node of ours behind (ZOOKEEPER-1262).
#[allow(clippy::too_many_arguments)]
async fn create_protected(
    session: &Arc<Session>,
    layout: &Layout,
    ask: &Ask<'_>,
    dir: &str,
    guid: &Uuid,
    data: &[u8],
    deadline: &Deadline,
    doing: &Site<'_>,
) -> Result<Created> {
    let space = ask.space();
    let prefix = node_prefix(dir, guid, ask.role);
    let marker = guid_marker(guid);
    let options = zk::CreateMode::EphemeralSequential.with_acls(session.acls());
    let mut doubtful = false;
    for _ in 0..ATTEMPTS {
        let create = session.client.create(&prefix, data, &options);
        let children = session.client.list_children(dir);
        match session.call_within(deadline, create).await {
            Ok((stat, sequence)) => {
                let listing = session.call_within(deadline, children).await.ok();
                return Ok(Created {
                    path: format!("{prefix}{sequence}"),
                    czxid: stat.czxid,
                    listing,
                    doubtful,
                });
            }
            Err(zk::Error::NoNode) => {
                drop(children);
                ensure_dir(session, layout, space, dir, deadline, doing).await?;
            }
            Err(e) if in_doubt(&e) => {
                drop(children);
                doubtful = true;
                if deadline.is_past() {
                    return Err(out_of_time(doing, "creating our queue node", e));
                }
                tracing::debug!(%prefix, error = %e, "zk create in doubt; looking for our node");
                reconnected(session, deadline, doing).await?;
                if let Some(found) =
                    find_ours(session, dir, space, &marker, deadline, doing).await?
                {
                    return Ok(found);
                }
            }
            Err(e) => return Err(doing.client_error(e)),
        }
    }
    Err(doing.error(
        ErrorKind::Unavailable,
        format!("could not create a queue node under {dir} after {ATTEMPTS} attempts"),
    ))
}

/// Our node, if a `create` whose reply was lost did create it.
///
/// The server we are connected to now may not have applied that `create`
/// yet (after a connection loss the client often moves to another member),
/// so the directory is `sync`ed first: the listing then reflects at least
/// everything the leader had committed when the sync reached it. If there
/// are several nodes of ours, the lowest is kept and the others are deleted
/// on the next listing.
async fn find_ours(
    session: &Session,
    dir: &str,
    space: Space,
    marker: &str,
    deadline: &Deadline,
    doing: &Site<'_>,
) -> Result<Option<Created>> {
    sync(session, dir, deadline, doing).await?;
    let children = list(session, dir, deadline, doing).await?;
    let ours = children
        .iter()
        .filter(|c| c.starts_with(marker))
        .cloned()
        .collect();
    let Some(child) = queue_order(ours, space).into_iter().next() else {
        return Ok(None);
    };
    let path = format!("{dir}/{child}");
    match session
        .call_within(deadline, session.client.check_stat(&path))
        .await
    {
        Ok(Some(stat)) => {
            tracing::debug!(%path, "zk found our node after an in-doubt create");
            Ok(Some(Created {
                path,
                czxid: stat.czxid,
                listing: Some(children),
                doubtful: true,
            }))
        }
        Ok(None) => Ok(None),
        Err(e) if in_doubt(&e) && deadline.is_past() => {
            Err(out_of_time(doing, "looking for our queue node", e))
        }
        Err(e) => Err(doing.client_error(e)),
    }
}

/// Brings the server we are connected to up to date with the leader for
/// `dir`, retrying through connection losses.
async fn sync(session: &Session, dir: &str, deadline: &Deadline, doing: &Site<'_>) -> Result<()> {
    let what = ("sync", "syncing");
    retried(session, deadline, doing, what, dir, (), || {
        session.client.sync(dir)
    })
    .await
}

/// Lists `dir`, retrying through connection losses. A missing directory is
/// an empty queue.
async fn list(
    session: &Session,
    dir: &str,
    deadline: &Deadline,
    doing: &Site<'_>,
) -> Result<Vec<String>> {
    let what = ("list", "listing");
    retried(session, deadline, doing, what, dir, Vec::new(), || {
        session.client.list_children(dir)
    })
    .await
}

/// Runs `call` on `dir` until it is answered, reconnecting after each
/// connection loss until `deadline`; `NoNode` answers `missing`. `what` is
/// the verb and its `-ing` form, for the errors.
pub(crate) async fn retried<T, F: Future<Output = Result<T, zk::Error>>>(
    session: &Session,
    deadline: &Deadline,
    doing: &Site<'_>,
    (verb, verbing): (&str, &str),
    dir: &str,
    missing: T,
    call: impl Fn() -> F,
) -> Result<T> {
    for _ in 0..ATTEMPTS {
        match session.call_within(deadline, call()).await {
            Ok(answer) => return Ok(answer),
            Err(zk::Error::NoNode) => return Ok(missing),
            Err(e) if in_doubt(&e) => {
                if deadline.is_past() {
                    return Err(out_of_time(doing, &format!("{verbing} {dir}"), e));
                }
                reconnected(session, deadline, doing).await?;
            }
            Err(e) => return Err(doing.client_error(e)),
        }
    }
    Err(doing.error(
        ErrorKind::Unavailable,
        format!("could not {verb} {dir} after {ATTEMPTS} attempts"),
    ))
}

/// Creates the per-name container node on demand, and what the layout puts
/// above it (see [`Layout::parent_of`]) when that is missing too.
async fn ensure_dir(
    session: &Session,
    layout: &Layout,
    space: Space,
    dir: &str,
    deadline: &Deadline,
    doing: &Site<'_>,
) -> Result<()> {
    let container = zk::CreateMode::Container.with_acls(session.acls());
    let in_doubt_retry = async |e: zk::Error| {
        if deadline.is_past() {
            return Err(out_of_time(doing, &format!("creating {dir}"), e));
        }
        reconnected(session, deadline, doing).await
    };
    for _ in 0..ATTEMPTS {
        match session
            .call_within(deadline, session.client.create(dir, &[], &container))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(e @ zk::Error::NoNode) => {
                let Some((parent, mode)) = layout.parent_of(space, dir) else {
                    return Err(doing.client_error(e));
                };
                let options = mode.with_acls(session.acls());
                match session
                    .call_within(deadline, session.client.mkdir(&parent, &options))
                    .await
                {
                    Ok(()) => {}
                    Err(e) if in_doubt(&e) => in_doubt_retry(e).await?,
                    Err(e) => return Err(doing.client_error(e)),
                }
            }
            Err(e) if in_doubt(&e) => in_doubt_retry(e).await?,
            Err(e) => return Err(doing.client_error(e)),
        }
    }
    Err(doing.error(
        ErrorKind::Unavailable,
        format!("could not create {dir} after {ATTEMPTS} attempts"),
    ))
}
