//! A held lock or leadership: our node at the head of the queue, watched so
//! that a deletion behind our back fires the lost signal at once.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use distlock_core::raw::{HeldLock, LossNotifier, Site};
use distlock_core::{Access, Error, ErrorKind, LockName, LostReason, LostSignal, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::AcquireCleanup;
use crate::errors::{ZkSite, in_doubt, session_over};
use crate::keys::Space;
use crate::session::Session;

/// The backend's handle on one held node.
pub(crate) struct ZkHeld {
    pub(crate) session: Arc<Session>,
    pub(crate) hold: u64,
    pub(crate) path: String,
    pub(crate) name: LockName,
    pub(crate) space: Space,
    /// What was granted (a lock or leadership is exclusive, a writer).
    pub(crate) access: Access,
    pub(crate) token: u64,
    pub(crate) notifier: LossNotifier,
    pub(crate) signal: LostSignal,
    /// The task watching our node; taken (detached) on release.
    pub(crate) watcher: Option<JoinHandle<()>>,
    /// Other nodes of this acquisition that may exist (a `create` was in
    /// doubt), deleted after the release.
    pub(crate) duplicates: Option<AcquireCleanup>,
}

impl fmt::Debug for ZkHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkHeld")
            .field("path", &self.path)
            .field("token", &self.token)
            .field("session", &self.session.client.session_id())
            .field("lost", &self.signal.reason())
            .finish()
    }
}

impl Drop for ZkHeld {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        self.session.forget(self.hold);
    }
}

impl ZkHeld {
    fn action(&self, verb: &str) -> String {
        let what = match self.space {
            Space::Lock => format!("lock {}", self.name),
            Space::Election => format!("leadership of {}", self.name),
            Space::Semaphore | Space::RwLock => self.access.describe(&self.name),
        };
        format!("{verb} {what} (token {})", self.token)
    }

    fn doing<'a>(&'a self, action: &'a str) -> Site<'a> {
        crate::errors::doing(action, &self.session.settings.connect_string)
    }

    /// The error for an operation on a lock that is already gone.
    fn gone(&self, action: &str) -> Error {
        let doing = self.doing(action);
        match self.signal.reason() {
            // Taken away, not given up: `LeaseLost`, as on every backend.
            Some(LostReason::Revoked | LostReason::Deleted) => doing.error(
                ErrorKind::LeaseLost,
                format!(
                    "node {} was deleted by another client while our session lived (the lock \
                     was broken); nothing was changed",
                    self.path
                ),
            ),
            Some(LostReason::Released) => doing.error(ErrorKind::NotHeld, "already released"),
            Some(LostReason::Disconnected) => doing.error(
                ErrorKind::LeaseLost,
                format!(
                    "the leader did not confirm our session within the safe window (the \
                     connection is quiet, or our server lost the leader), so the lock was given \
                     up; node {} is deleted when the connection returns",
                    self.path
                ),
            ),
            Some(reason) => {
                doing.error(ErrorKind::LeaseLost, format!("the lock was lost: {reason}"))
            }
            None => doing.error(
                ErrorKind::LeaseLost,
                "the session may have expired (the leader did not confirm it within the safe \
                 window)",
            ),
        }
    }

    /// Fails unless the lock is still ours as far as we can vouch.
    fn ensure_trusted(&self, action: &str) -> Result<()> {
        if self.signal.is_lost() || !self.session.is_trusted(self.hold) {
            return Err(self.gone(action));
        }
        Ok(())
    }

    /// Records that the node is gone and why.
    fn lost(&self, reason: LostReason) {
        if self.session.lose(self.hold) {
            self.notifier.fire(reason);
        }
    }

    /// Our node was found deleted by an answer on our session, so the
    /// session lives and another client deleted it: the lock was revoked,
    /// and `action` fails.
    fn node_deleted(&self, action: &str) -> Error {
        self.lost(LostReason::Revoked);
        self.gone(action)
    }

    /// A call on our node failed; an expired session has lost the lock.
    fn call_failed(&self, action: &str, e: zk::Error) -> Error {
        if session_over(&e) {
            self.lost(LostReason::Expired);
        }
        self.doing(action).client_error(e)
    }
}

#[async_trait]
impl HeldLock for ZkHeld {
    /// Checks that our node still exists. The session is what keeps it, and
    /// only the session's syncs extend the validity (an answer from our
    /// server says nothing about the leader); there is no per-lock lease.
    async fn renew(&self) -> Result<()> {
        let action = self.action("renewing");
        self.ensure_trusted(&action)?;
        match self
            .session
            .call(self.session.client.check_stat(&self.path))
            .await
        {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(self.node_deleted(&action)),
            Err(e) => Err(self.call_failed(&action, e)),
        }
    }

    /// Deletes our node. The lost signal fires once the outcome is known:
    /// `Released` after the delete succeeded, `Revoked` if the node was
    /// already gone (another client deleted it: the answer came on our live
    /// session), and, if the reply was lost, only once the retried
    /// delete succeeds in the background.
    async fn release(mut self: Box<Self>) -> Result<()> {
        let action = self.action("releasing");
        // Detached, not aborted: an armed watch ends on our delete's
        // notification (dropping it would cost a RemoveWatches request),
        // and while the hold is marked releasing it reports nothing.
        drop(self.watcher.take());
        if self.signal.is_lost() {
            return Err(self.gone(&action));
        }
        let Some(path) = self.session.take_for_release(self.hold) else {
            return Err(self.gone(&action));
        };
        let duplicates = self.duplicates.take();
        let doing = self.doing(&action);
        let finish = |reason| self.session.finish_release(self.hold, reason);
        let mut interrupted = Interrupted {
            session: &self.session,
            hold: self.hold,
            path: Some(path.clone()),
        };
        let deleted = self
            .session
            .call(self.session.client.delete(&path, None))
            .await;
        interrupted.path = None;
        if let Some(duplicates) = duplicates {
            // Only now: the lookup by GUID would find our own node too.
            self.session.remove_now(duplicates);
        }
        match deleted {
            Ok(()) => {
                finish(LostReason::Released);
                tracing::debug!(lock = %self.name, token = self.token, "zk lock released");
                Ok(())
            }
            Err(zk::Error::NoNode) => {
                finish(LostReason::Revoked);
                Err(doing.error(ErrorKind::LeaseLost,
                    format!("node {path} was already gone (deleted by another client: the lock was broken); nothing was deleted"),
                ))
            }
            Err(e) if session_over(&e) => {
                finish(LostReason::Expired);
                Err(doing.client_error(e))
            }
            Err(e) if in_doubt(&e) => {
                self.session.release_in_background(self.hold, path.clone());
                Err(doing
                    .error(
                        ErrorKind::Unavailable,
                        format!(
                            "release of {path} not confirmed ({e}); the node is deleted when the \
                             connection returns, or vanishes with the session"
                        ),
                    )
                    .with_source(e))
            }
            Err(e) => {
                finish(LostReason::RenewalFailed(format!(
                    "the release's delete failed: {e}"
                )));
                Err(doing.client_error(e))
            }
        }
    }

    /// A guard dropped where no runtime runs: the delete is sent at once on
    /// the session's runtime, as a release in the background would be.
    fn release_blocking(mut self: Box<Self>) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        if let Some(path) = self.session.take_for_release(self.hold) {
            self.session.release_in_background(self.hold, path);
        }
    }

    /// Forgets the lock as if its holder had crashed: the node stays for
    /// one session timeout (what a crashed holder's session would take to
    /// expire), then it is deleted even though the shared session lives on.
    /// No runtime is needed on the calling thread.
    fn abandon(mut self: Box<Self>) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        self.session.forget(self.hold);
        self.session.remove_later(self.path.clone());
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if self.space != Space::Election {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        let action = self.action("proclaiming on");
        self.ensure_trusted(&action)?;
        match self
            .session
            .call(self.session.client.set_data(&self.path, value, None))
            .await
        {
            Ok(_) => Ok(()),
            Err(zk::Error::NoNode) => Err(self.node_deleted(&action)),
            Err(e) => Err(self.call_failed(&action, e)),
        }
    }
}

/// A release whose future may be dropped while its delete is in flight
/// (release is not cancel safe): the release is then finished in the
/// background, so the hold is not left marked "releasing" for good.
struct Interrupted<'a> {
    session: &'a Arc<Session>,
    hold: u64,
    /// The node; `None` once the delete's outcome is in.
    path: Option<String>,
}

impl Drop for Interrupted<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            self.session.release_in_background(self.hold, path);
        }
    }
}

/// Watches our own node: its deletion fires the lost signal, `Revoked`
/// when another client deleted it while our session lives (an operator
/// broke the lock), `Expired` when the session ended.
///
/// The watch is armed [`Timing::arm_delay`](crate::session::Timing::arm_delay)
/// after the node is created, and not at all if the lock is released or
/// given up before: short critical sections cost no extra request, and a
/// deletion is still noticed within that delay plus one round trip. Armed
/// during a long wait in the queue, it is never on a hand-over's critical
/// path. `hold` is filled in once the node heads the queue and is registered.
pub(crate) async fn watch_own_node(
    session: Weak<Session>,
    hold: Arc<OnceLock<u64>>,
    path: String,
    notifier: LossNotifier,
) {
    let ended = notifier.signal();
    let delay = match session.upgrade() {
        Some(session) => session.timing.arm_delay(),
        None => return,
    };
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        _ = ended.lost() => return,
    }
    let lost = |reason: LostReason| {
        if let (Some(id), Some(session)) = (hold.get(), session.upgrade())
            && !session.lose(*id)
        {
            return;
        }
        notifier.fire(reason);
    };
    loop {
        // The session is held only while sending: a detached watcher must
        // not keep a dropped backend's session (and its nodes) alive.
        let Some(strong) = session.upgrade() else {
            return;
        };
        // Boxed, like every rare step below: this task lives as long as
        // the lock, and its size is the largest step's, paid per held lock.
        let request = Box::pin(strong.call(strong.client.get_and_watch_data(&path))).await;
        let timing = strong.timing;
        drop(strong);
        match request {
            Ok((_, _, watcher)) => {
                let event = watcher.changed().await;
                match event.event_type {
                    zk::EventType::NodeDeleted => {
                        return lost(Box::pin(why_deleted(&session)).await);
                    }
                    zk::EventType::Session => return lost(session_end(event.session_state)),
                    _ => {}
                }
            }
            // Answered on our session, so it lives: another client deleted it.
            Err(zk::Error::NoNode) => return lost(LostReason::Revoked),
            Err(e) if session_over(&e) => return lost(LostReason::Expired),
            Err(_) => {
                let Some(strong) = session.upgrade() else {
                    return;
                };
                let client = strong.client.clone();
                drop(strong);
                let until = Instant::now() + timing.session;
                if let Err(e) = Box::pin(crate::session::wait_connected(&client, until)).await
                    && session_over(&e)
                {
                    return lost(LostReason::Expired);
                }
            }
        }
    }
}

/// Why our node was deleted: `Revoked` if our session is still alive
/// (another client deleted the node), `Expired` if the deletion was the
/// session's end. A request answered on the session after the deletion
/// proves it lives, since an expired session never comes back.
async fn why_deleted(session: &Weak<Session>) -> LostReason {
    let Some(strong) = session.upgrade() else {
        return LostReason::Revoked;
    };
    let (client, timing) = (strong.client.clone(), strong.timing);
    let root = strong.settings.layout.root().to_owned();
    drop(strong);
    for _ in 0..2 {
        match tokio::time::timeout(timing.request, client.sync(&root)).await {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => return LostReason::Revoked,
            Ok(Err(e)) if session_over(&e) => return LostReason::Expired,
            _ => {
                let until = Instant::now() + timing.session;
                if let Err(e) = Box::pin(crate::session::wait_connected(&client, until)).await
                    && session_over(&e)
                {
                    return LostReason::Expired;
                }
            }
        }
    }
    // Connected again (or still trying) and never told the session ended.
    LostReason::Revoked
}

fn session_end(state: zk::SessionState) -> LostReason {
    match state {
        zk::SessionState::Expired => LostReason::Expired,
        other => LostReason::RenewalFailed(format!("zk session ended: {other}")),
    }
}
