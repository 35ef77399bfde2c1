//! The lost-lock signal: how a holder learns that its lock is gone.
//!
//! A backend keeps a [`LossNotifier`] next to each lock it holds and fires it
//! when renewal fails, the session expires, the key is deleted behind our back
//! or the local validity deadline passes. The first reason wins. The guard and
//! any number of cloned [`LostSignal`]s observe it.

use std::fmt;

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
        if fired && reason != LostReason::Released {
            tracing::warn!(%reason, "lock lost");
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
}
