//! The lost-lock signal: how a holder learns that its lock is gone.
//!
//! A backend keeps a [`LossNotifier`] next to each lock it holds and fires it
//! when renewal fails, the session expires, the key is deleted behind our back
//! or the local validity deadline passes. The first reason wins. The guard and
//! any number of cloned [`LostSignal`]s observe it.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;

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
#[derive(Debug, Clone)]
pub struct LossNotifier {
    tx: watch::Sender<Option<LostReason>>,
    hooks: Arc<Hooks>,
}

impl Default for LossNotifier {
    fn default() -> Self {
        Self::new()
    }
}

impl LossNotifier {
    /// A new notifier that has not fired.
    pub fn new() -> Self {
        LossNotifier {
            tx: watch::Sender::new(None),
            hooks: Arc::default(),
        }
    }

    /// Marks the lock lost. Only the first reason is kept; later calls do nothing.
    /// Returns whether this call was the one that fired.
    pub fn fire(&self, reason: LostReason) -> bool {
        let fired = self.tx.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason.clone());
                true
            } else {
                false
            }
        });
        if fired {
            if reason != LostReason::Released {
                tracing::warn!(%reason, "lock lost");
            }
            self.hooks.run(&reason);
        }
        fired
    }

    /// Whether it has fired.
    pub fn is_fired(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// A receiver for the signal.
    pub fn signal(&self) -> LostSignal {
        LostSignal {
            rx: self.tx.subscribe(),
            hooks: Arc::downgrade(&self.hooks),
        }
    }
}

/// Resolves when the lock is no longer held. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use lock_core::LostReason;
/// use lock_core::raw::LossNotifier;
/// let notifier = LossNotifier::new();
/// let signal = notifier.signal();
/// assert!(!signal.is_lost());
/// notifier.fire(LostReason::Expired);
/// assert_eq!(signal.lost().await, LostReason::Expired);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LostSignal {
    rx: watch::Receiver<Option<LostReason>>,
    /// The notifier's hooks; gone once every notifier is dropped.
    hooks: Weak<Hooks>,
}

impl LostSignal {
    /// Whether the lock is already gone.
    pub fn is_lost(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// The reason, once lost.
    pub fn reason(&self) -> Option<LostReason> {
        self.rx.borrow().clone()
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
        let mut rx = self.rx.clone();
        match rx.wait_for(|reason| reason.is_some()).await {
            Ok(reason) => reason.clone().unwrap_or(LostReason::Released),
            Err(_) => LostReason::Released,
        }
    }

    /// The underlying `watch` receiver, for use in `select!` loops.
    pub fn receiver(&self) -> watch::Receiver<Option<LostReason>> {
        self.rx.clone()
    }

    /// Runs `hook` once, when the lock is lost (at once if it already is),
    /// on the thread that fires the signal: it must be quick and must not
    /// block. A notifier dropped without firing runs it with
    /// [`LostReason::Released`], as [`lost`](Self::lost) reports it.
    ///
    /// What a task waiting on [`lost`](Self::lost) would do, without a task
    /// per held lock: lock-core counts losses in its metrics this way.
    pub(crate) fn on_lost(&self, hook: impl FnOnce(&LostReason) + Send + 'static) {
        let Some(hooks) = self.hooks.upgrade() else {
            return hook(&self.reason().unwrap_or(LostReason::Released));
        };
        let mut pending = hooks.lock();
        // Checked under the lock that `fire` takes after setting the reason:
        // either the reason is visible here, or `fire` will find the hook.
        if let Some(reason) = self.reason() {
            drop(pending);
            return hook(&reason);
        }
        pending.push(Box::new(hook));
    }
}

type Hook = Box<dyn FnOnce(&LostReason) + Send>;

/// Callbacks waiting for a notifier to fire.
#[derive(Default)]
struct Hooks(Mutex<Vec<Hook>>);

impl Hooks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Hook>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, reason: &LostReason) {
        let hooks = std::mem::take(&mut *self.lock());
        for hook in hooks {
            hook(reason);
        }
    }
}

impl Drop for Hooks {
    /// The last notifier went without firing: nobody keeps the lock.
    fn drop(&mut self) {
        self.run(&LostReason::Released);
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("pending", &self.lock().len())
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
    fn a_hook_added_after_the_loss_runs_at_once() {
        let notifier = LossNotifier::new();
        notifier.fire(LostReason::Deleted);
        let (seen, hook) = recorder();
        notifier.signal().on_lost(hook);
        assert_eq!(*seen.lock().unwrap(), [LostReason::Deleted]);
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
