//! One ZooKeeper session per backend: the client, its timing, the locks it
//! holds, and when it must stop trusting them.
//!
//! A lock's lease is the session, and only the leader expires sessions. The
//! session syncs periodically (see [`crate::vouch`]); each answered sync
//! moves forward the instant after which the leader is known to have seen
//! the session active, so the session cannot expire before that instant plus
//! the session timeout. The monitor pushes every held lock's [`Validity`]
//! towards that point (minus a safety margin of a third of the session
//! timeout) on each tick. When syncs stop being answered (the connection is
//! quiet, or our server lost the leader) the pushes stop, the validity runs
//! out before the leader could expire the session, and the monitor fires the
//! lost signal. A live connection alone vouches for nothing.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use distlock_core::raw::{LossNotifier, SentAt, Validity};
use distlock_core::{ErrorKind, LostReason, Result};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};
use zookeeper_client as zk;

use crate::acl;
use crate::cleanup::{self, AcquireCleanup};
use crate::config::Resolved;
use crate::deadline::Deadline;
use crate::errors::{ZkSite, in_doubt, session_over};
use crate::monitor;
use crate::vouch::{self, Evidence};

/// Timeouts derived from the negotiated session timeout, mirroring what
/// `zookeeper-client` does internally.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The negotiated session timeout: the TTL of every lock.
    pub(crate) session: Duration,
    /// The client's tick: an eighth of the connection timeout.
    pub(crate) tick: Duration,
    /// How long one request may take.
    pub(crate) request: Duration,
}

impl Timing {
    /// Mirrors `zookeeper-client`: with a configured connection timeout of
    /// at most 3/5 of the session timeout its tick is an eighth of it,
    /// otherwise a twentieth of the session timeout.
    fn new(session: Duration, configured_connection: Duration, request: Duration) -> Self {
        let tick = if configured_connection.is_zero() || configured_connection > session * 3 / 5 {
            session / 20
        } else {
            configured_connection / 8
        }
        .max(Duration::from_millis(1));
        Timing {
            session,
            tick,
            request,
        }
    }

    /// How long after creating a node we arm the watch on it: a tenth of the
    /// session timeout, at most 100 ms.
    pub(crate) fn arm_delay(&self) -> Duration {
        (self.session / 10).min(Duration::from_millis(100))
    }

    /// How long after the leader last saw our session we keep trusting a
    /// lock: two thirds of the session timeout. The last third is the safety
    /// margin for the leader's tick rounding, scheduling delays and clock
    /// drift: we stop trusting well before the leader could expire the
    /// session.
    pub(crate) fn trusted_for(&self) -> Duration {
        self.session * 2 / 3
    }
}

/// A lock or leadership held on this session.
#[derive(Debug)]
struct Hold {
    path: String,
    notifier: LossNotifier,
    validity: Validity,
    /// A release has sent (or is about to send) the delete: the node's
    /// deletion is its outcome to report, not a loss.
    releasing: bool,
}

/// A live ZooKeeper session and the locks held on it.
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    pub(crate) settings: Arc<Resolved>,
    pub(crate) timing: Timing,
    holds: Mutex<HashMap<u64, Hold>>,
    next_hold: AtomicU64,
    /// What the answered syncs prove.
    evidence: Mutex<Evidence>,
    /// The monitor and the sync loop.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The runtime the session was opened on: deletes sent from a
    /// destructor are followed up there, whatever thread drops what.
    runtime: tokio::runtime::Handle,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.client.session_id())
            .field("servers", &self.settings.connect_string)
            .field("state", &self.client.state())
            .field("timing", &self.timing)
            .field("holds", &self.lock_holds().len())
            .finish()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|p| p.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl Session {
    /// Connects, authenticates and starts the monitor, within the connect
    /// timeout. Fails with `InvalidConfig` if the server grants another
    /// session timeout than the one configured (it clamps the request into
    /// its `minSessionTimeout..maxSessionTimeout`).
    pub(crate) async fn open(settings: Arc<Resolved>) -> Result<Arc<Session>> {
        let doing = crate::errors::doing("connecting", &settings.connect_string);
        // A quarter of the session timeout (the client's default is 2/5):
        // a quiet connection is noticed, and another server tried, sooner,
        // so the syncs that vouch for held locks resume sooner.
        let connection_timeout = settings.session_timeout / 4;
        let connecting = SentAt::now();
        let mut connector = zk::Client::connector()
            .with_session_timeout(settings.session_timeout)
            .with_connection_timeout(connection_timeout)
            .with_fail_eagerly();
        if let Some(c) = &settings.credentials {
            let auth = format!("{}:{}", c.username, c.password);
            connector = connector.with_auth("digest", auth.as_bytes());
        }
        let client = match timeout(
            settings.connect_timeout,
            connector.connect(&settings.connect_string),
        )
        .await
        {
            Err(_) => {
                return Err(doing.error(
                    ErrorKind::Unavailable,
                    format!(
                        "no session within the connect timeout ({:?}); is a ZooKeeper server \
                         running and reachable there?",
                        settings.connect_timeout
                    ),
                ));
            }
            Ok(Err(e @ (zk::Error::NoHosts | zk::Error::ConnectionLoss | zk::Error::Timeout))) => {
                return Err(doing
                    .error(
                        ErrorKind::Unavailable,
                        format!(
                            "cannot open a session ({e}); is a ZooKeeper server running there?"
                        ),
                    )
                    .with_source(e));
            }
            Ok(Err(e)) => return Err(doing.client_error(e)),
            Ok(Ok(client)) => client,
        };
        let negotiated = client.session_timeout();
        if negotiated != settings.session_timeout {
            // Dropping the client closes the session.
            return Err(doing.error(
                ErrorKind::InvalidConfig,
                outside_range(settings.session_timeout, negotiated),
            ));
        }
        let timing = Timing::new(negotiated, connection_timeout, settings.request_timeout);
        tracing::debug!(session = %client.session_id(), servers = %settings.connect_string, "zk session open");
        let states = client.state_watcher();
        let session = Arc::new(Session {
            client,
            settings,
            timing,
            holds: Mutex::new(HashMap::new()),
            next_hold: AtomicU64::new(1),
            evidence: Mutex::new(Evidence::new(connecting)),
            tasks: Mutex::new(Vec::new()),
            runtime: tokio::runtime::Handle::current(),
        });
        let tasks = vec![
            monitor::spawn(Arc::downgrade(&session), states, timing.tick),
            vouch::spawn(
                Arc::downgrade(&session),
                session.settings.layout.root().to_owned(),
            ),
        ];
        *session.tasks.lock().unwrap_or_else(|p| p.into_inner()) = tasks;
        Ok(session)
    }

    /// ACLs for every node we create.
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        acl::node_acls(self.settings.credentials.is_some())
    }

    /// Whether the session has ended (expired, closed, or failed auth).
    pub(crate) fn is_over(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// Runs one request with the request timeout; a timeout is reported as
    /// `zk::Error::Timeout`, an in-doubt outcome like a connection loss.
    pub(crate) async fn call<T>(
        &self,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        timeout(self.timing.request, request)
            .await
            .unwrap_or(Err(zk::Error::Timeout))
    }

    /// Runs one request of an acquisition: like [`Session::call`], but cut
    /// short at the acquisition's hard deadline.
    pub(crate) async fn call_within<T>(
        &self,
        deadline: &Deadline,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        timeout_at(deadline.step(self.timing.request), request)
            .await
            .unwrap_or(Err(zk::Error::Timeout))
    }

    /// Waits until the session is connected again, or fails with the
    /// session's terminal error, or with `ConnectionLoss` at `until`.
    pub(crate) async fn wait_connected(&self, until: Instant) -> Result<(), zk::Error> {
        wait_connected(&self.client, until).await
    }

    fn lock_holds(&self) -> MutexGuard<'_, HashMap<u64, Hold>> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The leader has seen this session active after this instant, so it
    /// cannot expire it before this instant plus the session timeout.
    pub(crate) fn evidence(&self) -> SentAt {
        self.evidence
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seen()
    }

    /// Records an answered sync (see [`crate::vouch`]): held locks whose
    /// renewal was failing are healthy again.
    pub(crate) fn synced(&self, sent: SentAt, answered: SentAt) {
        self.evidence
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .synced(sent, answered, vouch::report_delay(self.timing.session));
        for hold in self.lock_holds().values() {
            hold.notifier.renewal_recovered();
        }
    }

    /// Records a sync that failed or went unanswered: the session's
    /// locks are still vouched for until their deadline, but renewal is
    /// failing, which their guards report.
    pub(crate) fn sync_failed(&self, why: &str) {
        for hold in self.lock_holds().values() {
            if hold.notifier.renewal_failing(why) {
                distlock_core::raw::count_renewal_failing(crate::errors::BACKEND);
            }
        }
    }

    /// Records a held lock so the monitor can vouch for it or give it up.
    pub(crate) fn register(&self, path: String, notifier: LossNotifier, validity: Validity) -> u64 {
        let id = self.next_hold.fetch_add(1, Ordering::Relaxed);
        self.lock_holds().insert(
            id,
            Hold {
                path,
                notifier,
                validity,
                releasing: false,
            },
        );
        id
    }

    /// Removes a hold that is no longer ours to track (abandoned, or its
    /// guard is gone). A hold being released stays until the release
    /// reports its outcome.
    pub(crate) fn forget(&self, id: u64) {
        let mut holds = self.lock_holds();
        if holds.get(&id).is_some_and(|hold| !hold.releasing) {
            holds.remove(&id);
        }
    }

    /// Records that a hold's node went away, unless a release is under way
    /// (its delete is what removed the node, and the release reports the
    /// outcome). Returns whether the caller should fire the lost signal.
    pub(crate) fn lose(&self, id: u64) -> bool {
        let mut holds = self.lock_holds();
        match holds.get(&id) {
            Some(hold) if hold.releasing => false,
            Some(_) => {
                holds.remove(&id);
                true
            }
            None => true,
        }
    }

    /// Starts releasing a hold: returns its path, and the hold stays
    /// registered (and watched over by the monitor) until
    /// [`Session::finish_release`]. `None` if it was already given up. A
    /// hold whose validity ran out is given up here (lost signal fired,
    /// node handed to cleanup) and `None` is returned.
    pub(crate) fn take_for_release(self: &Arc<Self>, id: u64) -> Option<String> {
        let mut holds = self.lock_holds();
        let hold = holds.get_mut(&id)?;
        if hold.validity.is_valid() {
            hold.releasing = true;
            return Some(hold.path.clone());
        }
        let hold = holds.remove(&id)?;
        drop(holds);
        hold.notifier.fire(LostReason::Disconnected);
        self.remove_now(AcquireCleanup::Node(hold.path));
        None
    }

    /// Ends a release with its outcome: the hold goes, and the lost signal
    /// fires with `reason` (unless something else ended the hold first).
    pub(crate) fn finish_release(&self, id: u64, reason: LostReason) {
        let hold = self.lock_holds().remove(&id);
        if let Some(hold) = hold {
            hold.notifier.fire(reason);
        }
    }

    /// Finishes an unconfirmed release in the background: the delete is
    /// retried when the connection returns, and `Released` fires once the
    /// node is gone (`Expired` fires instead if the session ends first).
    /// Holds the session weakly: a dropped backend's session goes, and its
    /// node with it.
    pub(crate) fn release_in_background(self: &Arc<Self>, id: u64, path: String) {
        let (client, request) = (self.client.clone(), self.timing.request);
        let session = Arc::downgrade(self);
        distlock_core::raw::spawn_background_on(&self.runtime, async move {
            let outcome = cleanup::remove(client, request, AcquireCleanup::Node(path)).await;
            let Some(session) = session.upgrade() else {
                return;
            };
            let reason = match outcome {
                cleanup::Outcome::Deleted => LostReason::Released,
                cleanup::Outcome::SessionEnded => LostReason::Expired,
                cleanup::Outcome::Failed(why) => {
                    LostReason::RenewalFailed(format!("the release's delete failed: {why}"))
                }
            };
            session.finish_release(id, reason);
        });
    }

    /// Whether a hold is still registered and within its validity.
    pub(crate) fn is_trusted(&self, id: u64) -> bool {
        self.lock_holds()
            .get(&id)
            .is_some_and(|hold| hold.validity.is_valid())
    }

    /// One monitor tick: give up holds whose validity ran out, vouch for the
    /// rest from the latest evidence, and end everything if the session is
    /// over.
    /// Returns whether the monitor should keep running.
    pub(crate) fn check_holds(self: &Arc<Self>) -> bool {
        let state = self.client.state();
        let mut holds = self.lock_holds();
        if state.is_terminated() {
            let reason = match state {
                zk::SessionState::Expired => LostReason::Expired,
                other => LostReason::RenewalFailed(format!("zk session ended: {other}")),
            };
            for (_, hold) in holds.drain() {
                hold.notifier.fire(reason.clone());
            }
            return false;
        }
        let evidence = self.evidence();
        // Moves every deadline on by the evidence; a validity that has
        // already lapsed stays lapsed, and its lock is given up.
        let trusted_for = self.timing.trusted_for();
        let lapsed: Vec<u64> = holds
            .iter()
            .filter(|(_, hold)| !hold.validity.renewed_at(&evidence, trusted_for))
            .map(|(id, _)| *id)
            .collect();
        for id in lapsed {
            if let Some(hold) = holds.remove(&id) {
                tracing::warn!(
                    path = %hold.path,
                    session = %self.client.session_id(),
                    "zk leader not confirmed within the safe window; lock no longer trusted"
                );
                hold.notifier.fire(LostReason::Disconnected);
                self.remove_now(AcquireCleanup::Node(hold.path));
            }
        }
        true
    }

    /// Deletes an abandoned lock's node one session timeout from now, when
    /// the server would have expired the session of a holder that crashed.
    /// Nothing is done if the session is gone by then (its nodes went with
    /// it).
    pub(crate) fn remove_later(self: &Arc<Self>, path: String) {
        let session = Arc::downgrade(self);
        let delay = self.timing.session;
        self.runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(session) = session.upgrade() {
                session.remove_now(AcquireCleanup::Node(path));
            }
        });
    }

    /// Deletes a leftover node: the delete is sent now (so it precedes any
    /// later request of this session), and retried in the background until
    /// it succeeds or the session ends. Needs no runtime on the calling
    /// thread: the follow-up runs on the session's runtime.
    pub(crate) fn remove_now(&self, leftover: AcquireCleanup) {
        drop(self.remove(leftover));
    }

    /// [`remove_now`](Self::remove_now), and waits (until `until` at the
    /// latest) until the node is gone: an acquisition that gives up has
    /// left the queue when it returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the removal goes on in the background.
    pub(crate) async fn remove_and_wait(&self, leftover: AcquireCleanup, until: Instant) {
        let removal = self.remove(leftover);
        let _ = timeout_at(until, removal).await;
    }

    /// Sends the delete of `leftover` now; the returned task sees it through.
    fn remove(&self, leftover: AcquireCleanup) -> JoinHandle<()> {
        let runtime = &self.runtime;
        tracing::debug!(?leftover, "zk deleting a node we no longer need");
        let client = self.client.clone();
        let request = self.timing.request;
        match leftover {
            AcquireCleanup::Node(path) => {
                let delete = client.delete(&path, None);
                distlock_core::raw::spawn_background_on(runtime, async move {
                    match timeout(request, delete).await {
                        Ok(Ok(()) | Err(zk::Error::NoNode)) => {}
                        Ok(Err(e)) if session_over(&e) => {}
                        Ok(Err(e)) if !in_doubt(&e) => {
                            tracing::warn!(%path, error = %e, "zk could not delete a leftover node");
                        }
                        _ => {
                            cleanup::remove(client, request, AcquireCleanup::Node(path)).await;
                        }
                    }
                })
            }
            guid @ AcquireCleanup::Guid { .. } => {
                distlock_core::raw::spawn_background_on(runtime, async move {
                    cleanup::remove(client, request, guid).await;
                })
            }
        }
    }
}

/// Why a session timeout the server changed is refused: every lock's TTL
/// would silently differ from the one configured.
fn outside_range(requested: Duration, negotiated: Duration) -> String {
    let (bound, knob, advice) = if negotiated > requested {
        ("minimum", "minSessionTimeout", "at least")
    } else {
        ("maximum", "maxSessionTimeout", "at most")
    };
    format!(
        "the server granted a session timeout of {negotiated:?} instead of the requested \
         {requested:?} (the TTL of every lock): {negotiated:?} is its {bound} ({knob}; \
         ZooKeeper allows minSessionTimeout..maxSessionTimeout, by default 2 to 20 times its \
         tickTime); set the TTL to {advice} {negotiated:?}, or change {knob} on the servers"
    )
}

/// See [`Session::wait_connected`].
pub(crate) async fn wait_connected(client: &zk::Client, until: Instant) -> Result<(), zk::Error> {
    let mut states = client.state_watcher();
    loop {
        match states.peek_state() {
            zk::SessionState::SyncConnected => return Ok(()),
            zk::SessionState::Expired => return Err(zk::Error::SessionExpired),
            zk::SessionState::AuthFailed => return Err(zk::Error::AuthFailed),
            zk::SessionState::Closed => return Err(zk::Error::ClientClosed),
            _ => {}
        }
        if timeout_at(until, states.changed()).await.is_err() {
            return Err(zk::Error::ConnectionLoss);
        }
    }
}
