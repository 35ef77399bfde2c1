//! The lost-lock signal: how a holder learns that its lock is gone.
//!
//! A backend keeps a [`LossNotifier`] next to each lock it holds and fires it
//! when renewal fails, the session expires, the key is deleted behind our back
//! or the local validity deadline passes. The first reason wins. The guard and
//! any number of cloned [`LostSignal`]s observe it.
//!
//! Before a loss there can be a warning: renewals fail while the lease still
//! has validity left. The notifier records that too
//! ([`LossNotifier::renewal_failing`]), so a holder can wind down before the
//! lock is gone rather than after.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Why a lock stopped being held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The holder released it (not a loss, but the lock is no longer held).
    Released,
    /// The server says the lease or session has expired.
    Expired,
    /// Renewal failed in a way that means the lease is gone.
    RenewalFailed(String),
    /// The lock's key or node was deleted, or now belongs to someone else.
    Deleted,
    /// The connection was lost for long enough that the server may have
    /// expired the lease; we stop trusting the lock.
    Disconnected,
    /// The local validity deadline (TTL minus a safety margin since the last
    /// successful renewal) passed without a renewal.
    DeadlineMissed,
    /// Someone else ended the lock: an operator broke it
    /// ([`force_release`](crate::LockBackend::force_release)), or its lease
    /// or session was revoked from outside.
    Revoked,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Released => f.write_str("released"),
            LostReason::Expired => f.write_str("lease or session expired"),
            LostReason::RenewalFailed(why) => write!(f, "renewal failed: {why}"),
            LostReason::Deleted => f.write_str("lock key deleted or taken over"),
            LostReason::Disconnected => f.write_str("disconnected past the safe window"),
            LostReason::DeadlineMissed => f.write_str("validity deadline passed without renewal"),
            LostReason::Revoked => f.write_str("broken or revoked by someone else"),
        }
    }
}

/// The sending side, kept by the backend. Cloning shares the same signal.
///
/// The signal is one small allocation per lock (no channel): a process may
/// hold tens of thousands of locks, each with its own signal.
#[derive(Debug)]
pub struct LossNotifier {
    shared: Arc<Shared>,
}

impl Default for LossNotifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for LossNotifier {
    fn clone(&self) -> Self {
        self.shared.state().notifiers += 1;
        LossNotifier {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for LossNotifier {
    /// The last notifier going without firing means nobody keeps the lock:
    /// it counts as fired with [`LostReason::Released`], so that every view
    /// of the grant (signals, guards, health) says so at once, not only
    /// waiters and hooks.
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.notifiers -= 1;
        if state.notifiers > 0 || state.reason.is_some() {
            return;
        }
        state.reason = Some(LostReason::Released);
        let hooks = std::mem::take(&mut state.hooks);
        drop(state);
        self.shared.wake.notify_waiters();
        for hook in hooks {
            hook(&LostReason::Released);
        }
    }
}

impl LossNotifier {
    /// A new notifier that has not fired.
    pub fn new() -> Self {
        LossNotifier {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    reason: None,
                    failing: None,
                    notifiers: 1,
                    hooks: Vec::new(),
                }),
                wake: Notify::new(),
            }),
        }
    }

    /// Marks the lock lost. Only the first reason is kept; later calls do nothing.
    /// Returns whether this call was the one that fired.
    pub fn fire(&self, reason: LostReason) -> bool {
        let mut state = self.shared.state();
        if state.reason.is_some() {
            return false;
        }
        state.reason = Some(reason.clone());
        let hooks = std::mem::take(&mut state.hooks);
        drop(state);
        self.shared.wake.notify_waiters();
        if reason != LostReason::Released {
            tracing::warn!(%reason, "lock lost");
        }
        for hook in hooks {
            hook(&reason);
        }
        true
    }

    /// Records that renewals are failing while the lease still has validity
    /// left: a warning, not yet a loss. Returns whether this starts a spell
    /// of failures (the lock was healthy before). Ignored once lost.
    pub fn renewal_failing(&self, why: impl fmt::Display) -> bool {
        let mut state = self.shared.state();
        if state.reason.is_some() {
            return false;
        }
        let started = state.failing.is_none();
        state.failing = Some(why.to_string().into_boxed_str());
        drop(state);
        if started {
            self.shared.wake.notify_waiters();
        }
        started
    }

    /// Records that a renewal succeeded again after failures. Returns
    /// whether renewal was failing before.
    pub fn renewal_recovered(&self) -> bool {
        let mut state = self.shared.state();
        let was_failing = state.failing.take().is_some();
        drop(state);
        if was_failing {
            self.shared.wake.notify_waiters();
        }
        was_failing
    }

    /// Whether it has fired.
    pub fn is_fired(&self) -> bool {
        self.shared.state().reason.is_some()
    }

    /// A receiver for the signal.
    pub fn signal(&self) -> LostSignal {
        LostSignal {
            shared: self.shared.clone(),
        }
    }
}

/// Resolves when the lock is no longer held. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use distlock_core::LostReason;
/// use distlock_core::raw::LossNotifier;
/// let notifier = LossNotifier::new();
/// let signal = notifier.signal();
/// assert!(!signal.is_lost());
/// notifier.fire(LostReason::Expired);
/// assert_eq!(signal.lost().await, LostReason::Expired);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LostSignal {
    shared: Arc<Shared>,
}

impl LostSignal {
    /// Whether the lock is already gone: fired, or every notifier went
    /// without firing (then [`reason`](Self::reason) is `Released`).
    pub fn is_lost(&self) -> bool {
        self.shared.state().reason.is_some()
    }

    /// The reason, once lost.
    pub fn reason(&self) -> Option<LostReason> {
        self.shared.state().reason.clone()
    }

    /// While the lock is held but its renewals fail: the last error. `None`
    /// when renewal is healthy, and once the lock is lost.
    pub fn renewal_failure(&self) -> Option<String> {
        let state = self.shared.state();
        match state.reason {
            Some(_) => None,
            None => state.failing.as_deref().map(str::to_owned),
        }
    }

    /// Waits until renewal starts or stops failing, or the lock is lost,
    /// whichever is first; `failing` is whether the caller last saw it
    /// failing. Returns at once if that is already out of date.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes; call it again to keep waiting.
    pub async fn renewal_changed(&self, failing: bool) {
        loop {
            let woken = self.shared.wake.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            {
                let state = self.shared.state();
                if state.reason.is_some() || state.failing.is_some() != failing {
                    return;
                }
            }
            woken.await;
        }
    }

    /// Waits until the lock is gone and returns why.
    ///
    /// If the backend dropped its notifier without firing, that is reported as
    /// [`LostReason::Released`]: nobody is keeping the lock any more.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes; call it again to keep waiting.
    pub async fn lost(&self) -> LostReason {
        loop {
            let woken = self.shared.wake.notified();
            let mut woken = std::pin::pin!(woken);
            // Registered before the state is read: a `fire` after the read
            // still wakes this waiter.
            woken.as_mut().enable();
            if let Some(reason) = self.shared.state().reason.clone() {
                return reason;
            }
            woken.await;
        }
    }

    /// Runs `hook` once, when the lock is lost (at once if it already is),
    /// on the thread that fires the signal: it must be quick and must not
    /// block. A notifier dropped without firing runs it with
    /// [`LostReason::Released`], as [`lost`](Self::lost) reports it.
    ///
    /// What a task waiting on [`lost`](Self::lost) would do, without a task
    /// per held lock: distlock-core counts losses in its metrics this way.
    pub(crate) fn on_lost(&self, hook: impl FnOnce(&LostReason) + Send + 'static) {
        let mut state = self.shared.state();
        match state.reason.clone() {
            Some(reason) => {
                drop(state);
                hook(&reason);
            }
            None => state.hooks.push(Box::new(hook)),
        }
    }
}

type Hook = Box<dyn FnOnce(&LostReason) + Send>;

/// What a notifier and its signals share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the tasks waiting in [`LostSignal::lost`].
    wake: Notify,
}

struct State {
    /// The first reason fired (`Released` when every notifier went without
    /// firing); `None` while the lock is held.
    reason: Option<LostReason>,
    /// The last renewal error while renewals fail and validity is left.
    failing: Option<Box<str>>,
    /// Live [`LossNotifier`]s; at zero nobody can fire any more.
    notifiers: usize,
    /// Callbacks waiting for the loss.
    hooks: Vec<Hook>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("LostSignal")
            .field("reason", &state.reason)
            .field("failing", &state.failing)
            .field("hooks", &state.hooks.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> (
        Arc<Mutex<Vec<LostReason>>>,
        impl FnOnce(&LostReason) + Send + 'static,
    ) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        (seen, move |reason: &LostReason| {
            into.lock().unwrap().push(reason.clone())
        })
    }

    #[test]
    fn a_hook_runs_once_with_the_first_reason() {
        let notifier = LossNotifier::new();
        let (seen, hook) = recorder();
        notifier.signal().on_lost(hook);
        assert!(seen.lock().unwrap().is_empty());
        notifier.fire(LostReason::Expired);
        notifier.fire(LostReason::Revoked);
        drop(notifier);
        assert_eq!(*seen.lock().unwrap(), [LostReason::Expired]);
    }

    #[test]
    fn renewal_failures_are_a_warning_that_ends_with_recovery_or_loss() {
        let notifier = LossNotifier::new();
        let signal = notifier.signal();
        assert_eq!(signal.renewal_failure(), None);
        assert!(notifier.renewal_failing("timed out"));
        assert!(!notifier.renewal_failing("timed out again"), "one spell");
        assert_eq!(signal.renewal_failure().as_deref(), Some("timed out again"));
        assert!(!signal.is_lost());
        assert!(notifier.renewal_recovered());
        assert_eq!(signal.renewal_failure(), None);
        notifier.renewal_failing("refused");
        notifier.fire(LostReason::DeadlineMissed);
        assert_eq!(signal.renewal_failure(), None, "lost is not failing");
        assert!(!notifier.renewal_failing("late"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_change_of_renewal_health_wakes_its_waiter() {
        let notifier = LossNotifier::new();
        let signal = notifier.signal();
        let waiting = tokio::spawn({
            let signal = signal.clone();
            async move { signal.renewal_changed(false).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        notifier.renewal_failing("timed out");
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
        // Already out of date: returns at once.
        signal.renewal_changed(false).await;
        notifier.fire(LostReason::Expired);
        signal.renewal_changed(true).await;
    }

    #[test]
    fn a_hook_added_after_the_loss_runs_at_once() {
        let notifier = LossNotifier::new();
        notifier.fire(LostReason::Deleted);
        let (seen, hook) = recorder();
        notifier.signal().on_lost(hook);
        assert_eq!(*seen.lock().unwrap(), [LostReason::Deleted]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_signal_says_released_once_the_last_notifier_is_dropped() {
        let notifier = LossNotifier::new();
        let signal = notifier.signal();
        let clone = signal.clone();
        notifier.renewal_failing("timed out");
        drop(notifier);
        for view in [&signal, &clone] {
            assert!(view.is_lost());
            assert_eq!(view.reason(), Some(LostReason::Released));
            assert_eq!(view.renewal_failure(), None, "lost is not failing");
        }
        let lost = tokio::time::timeout(std::time::Duration::from_secs(5), clone.lost());
        assert_eq!(lost.await.expect("resolved"), LostReason::Released);
    }

    #[test]
    fn a_notifier_dropped_without_firing_runs_hooks_as_released() {
        let notifier = LossNotifier::new();
        let signal = notifier.signal();
        let (seen, hook) = recorder();
        signal.on_lost(hook);
        let clone = notifier.clone();
        drop(notifier);
        assert!(seen.lock().unwrap().is_empty(), "a clone still keeps it");
        drop(clone);
        assert_eq!(*seen.lock().unwrap(), [LostReason::Released]);
        let (late, hook) = recorder();
        signal.on_lost(hook);
        assert_eq!(*late.lock().unwrap(), [LostReason::Released]);
    }
}
