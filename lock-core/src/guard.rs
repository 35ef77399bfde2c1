//! The lock guard: proof of holding a lock, its fencing token, and its lost signal.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::lost::{LostReason, LostSignal};
use crate::name::LockName;
use crate::renewal::Validity;

/// The backend's side of a held lock. Implemented by backends; users hold a [`LockGuard`].
#[async_trait]
pub trait HeldLock: fmt::Debug + Send + Sync + 'static {
    /// Renews the lease now, in addition to the background renewal.
    ///
    /// Fails with `LeaseLost` if the lease is gone; it never re-acquires.
    async fn renew(&self) -> Result<()>;

    /// Releases the lock, stops renewal and fires the lost signal with
    /// [`LostReason::Released`].
    ///
    /// Must never delete a lock that is no longer ours: if our lease is gone
    /// it returns `NotHeld` (or `LeaseLost`) and touches nothing.
    async fn release(self: Box<Self>) -> Result<()>;

    /// Stops renewing without releasing, as if the holder had crashed: the
    /// lock frees itself when its TTL runs out.
    fn abandon(self: Box<Self>);

    /// Replaces the value published with an election leadership.
    /// Lock guards that are not leaderships return `Unsupported`.
    async fn proclaim(&self, _value: &[u8]) -> Result<()> {
        Err(Error::unsupported(
            "proclaim is only available on a leadership",
        ))
    }
}

/// A held lock.
///
/// While the guard lives, the backend renews its lease in the background.
/// Watch [`lost`](Self::lost) (or [`is_held`](Self::is_held)) to learn that the
/// lock is gone, and pass [`token`](Self::token) to the resource you protect so
/// it can reject writes from stale holders.
///
/// Release it with [`release`](Self::release) to learn whether that worked.
/// Dropping the guard releases in the background on a best-effort basis (if a
/// Tokio runtime is running); the lease TTL is the backstop.
pub struct LockGuard {
    name: LockName,
    token: FencingToken,
    key: String,
    ttl: Duration,
    lost: LostSignal,
    validity: Option<Validity>,
    held: Option<Box<dyn HeldLock>>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .field("held", &self.is_held())
            .finish()
    }
}

impl LockGuard {
    /// Assembles a guard. Called by backends after a successful acquisition.
    pub fn new(
        name: LockName,
        token: FencingToken,
        key: String,
        ttl: Duration,
        lost: LostSignal,
        held: Box<dyn HeldLock>,
    ) -> Self {
        LockGuard {
            name,
            token,
            key,
            ttl,
            lost,
            validity: None,
            held: Some(held),
        }
    }

    /// Adds a local validity deadline that [`is_held`](Self::is_held) checks.
    pub fn with_validity(mut self, validity: Validity) -> Self {
        self.validity = Some(validity);
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token of this acquisition.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The backend key (or node path) that represents this acquisition.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease TTL in force (after the backend's rounding).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the lock is still ours: not lost, and within its local validity
    /// deadline where the backend tracks one. A `false` here is final.
    pub fn is_held(&self) -> bool {
        !self.lost.is_lost() && self.validity.as_ref().is_none_or(Validity::is_valid)
    }

    /// A cloneable signal that resolves when the lock is gone.
    pub fn lost_signal(&self) -> LostSignal {
        self.lost.clone()
    }

    /// Waits until the lock is gone and returns why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the signal.
    pub async fn lost(&self) -> LostReason {
        self.lost.lost().await
    }

    /// Renews the lease now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled renewal may or may not have reached the server,
    /// and either way the background renewal carries on.
    pub async fn renew(&self) -> Result<()> {
        match &self.held {
            Some(held) => held.renew().await,
            None => Err(Error::not_held(format!("lock {} was released", self.name))),
        }
    }

    /// Releases the lock and reports whether that worked.
    ///
    /// Returns `NotHeld` or `LeaseLost` if the lock was already gone; in that
    /// case nothing was deleted, so another holder is never disturbed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled release may or may not have deleted the
    /// lock. Either way the lease is no longer renewed, so the TTL frees it.
    pub async fn release(mut self) -> Result<()> {
        match self.held.take() {
            Some(held) => held.release().await,
            None => Ok(()),
        }
    }

    /// Stops renewing without releasing, as if this process had crashed.
    /// The lock stays taken until its TTL runs out. Useful in tests and for
    /// handing a lock's remaining lease to nobody on purpose.
    pub fn abandon(mut self) {
        if let Some(held) = self.held.take() {
            held.abandon();
        }
    }

    /// The backend's handle, for wrappers such as [`Leadership`](crate::Leadership).
    pub(crate) fn held(&self) -> Option<&dyn HeldLock> {
        self.held.as_deref()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let name = self.name.clone();
                runtime.spawn(async move {
                    if let Err(e) = held.release().await {
                        tracing::debug!(lock = %name, error = %e, "background release failed; the TTL will free the lock");
                    }
                });
            }
            Err(_) => held.abandon(),
        }
    }
}
