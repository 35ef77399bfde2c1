//! How a held lock is doing, between "held" and "lost": renewals that fail
//! while the lease still has validity left are a warning a holder can act
//! on (finish or checkpoint its work) before the lock is gone.

use std::time::Duration;

use crate::lost::{LostReason, LostSignal};
use crate::validity::Validity;

/// The health of a held lock: see [`LockGuard::health`](crate::LockGuard::health).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockHealth {
    /// Held, and renewal is keeping up.
    Held,
    /// Still held, but renewals are failing: unless one succeeds, the lock
    /// is lost when `remaining` runs out.
    RenewalFailing {
        /// The validity left now; `None` where the backend tracks no
        /// local deadline.
        remaining: Option<Duration>,
        /// The last renewal's error.
        error: String,
    },
    /// No longer held.
    Lost(LostReason),
}

impl LockHealth {
    /// Whether the lock is still held (healthy or not).
    pub fn is_held(&self) -> bool {
        !matches!(self, LockHealth::Lost(_))
    }

    /// The health shown by `lost` and `validity` now.
    pub(crate) fn read(lost: &LostSignal, validity: Option<&Validity>) -> LockHealth {
        if let Some(reason) = lost.reason() {
            return LockHealth::Lost(reason);
        }
        if validity.is_some_and(|v| !v.is_valid()) {
            return LockHealth::Lost(LostReason::DeadlineMissed);
        }
        match lost.renewal_failure() {
            Some(error) => LockHealth::RenewalFailing {
                remaining: validity.map(Validity::remaining),
                error,
            },
            None => LockHealth::Held,
        }
    }

    /// Waits until the health's kind differs from `seen`'s.
    pub(crate) async fn changed(
        lost: &LostSignal,
        validity: Option<&Validity>,
        seen: &LockHealth,
    ) -> LockHealth {
        loop {
            let now = Self::read(lost, validity);
            if std::mem::discriminant(&now) != std::mem::discriminant(seen)
                || matches!(now, LockHealth::Lost(_))
            {
                return now;
            }
            let failing = matches!(now, LockHealth::RenewalFailing { .. });
            // The validity deadline ends the lock even if nothing fires.
            let deadline = validity.map(Validity::until);
            tokio::select! {
                () = lost.renewal_changed(failing) => {}
                () = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }
}

impl std::fmt::Display for LockHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockHealth::Held => f.write_str("held"),
            LockHealth::RenewalFailing {
                remaining: Some(left),
                error,
            } => write!(
                f,
                "held, but renewal is failing with {} of the lease left: {error}",
                crate::duration::human_duration(*left)
            ),
            LockHealth::RenewalFailing {
                remaining: None,
                error,
            } => write!(f, "held, but renewal is failing: {error}"),
            LockHealth::Lost(reason) => write!(f, "lost: {reason}"),
        }
    }
}
