//! The lock guard: proof of holding a lock, its fencing token, and its lost signal.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::health::LockHealth;
use crate::lost::{LostReason, LostSignal};
use crate::name::LockName;
use crate::telemetry::{self, HoldMetrics};
use crate::validity::Validity;

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
    /// it returns `LeaseLost` (or `NotHeld`, which [`LockGuard::release`]
    /// reports as `LeaseLost`) and touches nothing.
    async fn release(self: Box<Self>) -> Result<()>;

    /// Stops renewing without releasing, as if the holder had crashed: the
    /// lock frees itself when its TTL runs out.
    fn abandon(self: Box<Self>);

    /// Stops renewing at once, before a release that may run later (or
    /// never: a dropped guard's release is a task on whatever runtime is
    /// current, which may not be driven). Renewal must not outlive the
    /// guard. The default does nothing, for leases nothing renews.
    fn stop_renewal(&mut self) {}

    /// Releases without an async runtime, as well as it can: called when the
    /// guard is dropped where no Tokio runtime is running. The default
    /// abandons the lock to its TTL.
    fn release_blocking(self: Box<Self>) {
        self.abandon();
    }

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
/// Release it with [`release`](Self::release) to learn whether that worked,
/// or hold it for a scope with
/// [`LockBackendExt::with_lock`](crate::LockBackendExt::with_lock), which
/// always releases.
///
/// # Dropping a guard
///
/// Dropping the guard stops its renewal and releases the lock as well as it
/// can, without reporting errors:
///
/// - inside a Tokio runtime, the release runs as a background task. It
///   completes unless the runtime shuts down first, as it does right after
///   `main` returns: call [`wait_for_background`](crate::wait_for_background)
///   before then, or release explicitly;
/// - with no runtime running, backends that can release without one do so
///   synchronously (memory, file, Redis); the others leave the lock to expire.
///
/// In every case the lease TTL is the backstop: a lock that was not released
/// frees itself when its TTL runs out.
pub struct LockGuard {
    name: LockName,
    token: FencingToken,
    key: String,
    ttl: Duration,
    lost: LostSignal,
    validity: Option<Validity>,
    held: Option<Box<dyn HeldLock>>,
    hold: Option<HoldMetrics>,
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

/// A guard whose lease `held` keeps: `held` releases it, `lost` reports
/// its end, and `validity`, when given, is the local deadline that
/// [`LockGuard::is_held`] checks. Backends whose lease is a session call it
/// through [`raw::session_guard`](crate::raw::session_guard).
pub fn session_guard(
    name: LockName,
    token: FencingToken,
    key: String,
    ttl: Duration,
    lost: LostSignal,
    held: Box<dyn HeldLock>,
    validity: Option<Validity>,
) -> LockGuard {
    LockGuard {
        name,
        token,
        key,
        ttl,
        lost,
        validity,
        held: Some(held),
        hold: None,
    }
}

impl LockGuard {
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

    /// How much longer the lock is certainly ours if no renewal succeeds from
    /// now on; zero once it is not held. `None` where the backend tracks no
    /// local deadline.
    ///
    /// Work that must finish while the lock is held should finish within this.
    pub fn remaining_validity(&self) -> Option<Duration> {
        let validity = self.validity.as_ref()?;
        if self.lost.is_lost() {
            return Some(Duration::ZERO);
        }
        Some(validity.remaining())
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

    /// How the lock is doing: held, held while its renewals fail (with the
    /// validity left: a warning, time to wind down), or lost.
    pub fn health(&self) -> LockHealth {
        LockHealth::read(&self.lost, self.validity.as_ref())
    }

    /// Waits until [`health`](Self::health) differs from `seen` (held,
    /// renewal failing, lost: the kind, not the figures) and returns it.
    /// `guard.health_changed(&LockHealth::Held)` waits for the first
    /// renewal failure or the loss, whichever is first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes; call it again to keep waiting.
    pub async fn health_changed(&self, seen: &LockHealth) -> LockHealth {
        LockHealth::changed(&self.lost, self.validity.as_ref(), seen).await
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
    /// Returns `LeaseLost`, on every backend, if the lock was already taken
    /// from this guard (expired, broken with `force_release`, taken over);
    /// in that case nothing was deleted, so another holder is never
    /// disturbed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled release may or may not have deleted the
    /// lock. Either way the lease is no longer renewed, so the TTL frees it.
    pub async fn release(mut self) -> Result<()> {
        let backend = self.hold.as_ref().map_or("unknown", HoldMetrics::backend);
        match self.held.take() {
            Some(held) => {
                // A lock is released once, so "not ours" can only mean
                // taken away: `LeaseLost`, whatever the backend said.
                let release = async {
                    held.release().await.map_err(|e| match e.kind() {
                        ErrorKind::NotHeld => e.with_kind(ErrorKind::LeaseLost),
                        _ => e,
                    })
                };
                telemetry::observe_release(backend, &self.name, self.token.get(), release).await
            }
            None => Ok(()),
        }
    }

    /// Counts this guard's hold under `backend` in the metrics.
    pub(crate) fn observed(mut self, backend: &'static str) -> Self {
        self.hold = Some(HoldMetrics::start(backend, self.lost.clone()));
        self
    }

    /// Stops renewing without releasing, as if this process had crashed.
    /// The lock stays taken until its TTL runs out. Useful in tests and for
    /// handing a lock's remaining lease to nobody on purpose.
    pub fn abandon(mut self) {
        if let Some(held) = self.held.take() {
            held.abandon();
        }
    }

    /// What work inside a scope may know of this lock.
    pub(crate) fn held_view(&self) -> Held {
        Held {
            name: self.name.clone(),
            token: self.token,
            lost: self.lost.clone(),
            validity: self.validity.clone(),
        }
    }

    /// The backend's handle, for wrappers such as [`Leadership`](crate::Leadership).
    pub(crate) fn held(&self) -> Option<&dyn HeldLock> {
        self.held.as_deref()
    }
}

/// A view of a lock held by [`with_lock`](crate::LockBackendExt::with_lock):
/// its token and lost signal, but not the power to release it.
#[derive(Debug, Clone)]
pub struct Held {
    name: LockName,
    token: FencingToken,
    lost: LostSignal,
    validity: Option<Validity>,
}

impl Held {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token: pass it to the resource you write to.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether the lock is still ours; see [`LockGuard::is_held`].
    pub fn is_held(&self) -> bool {
        !self.lost.is_lost() && self.validity.as_ref().is_none_or(Validity::is_valid)
    }

    /// A signal that resolves when the lock is gone.
    pub fn lost_signal(&self) -> LostSignal {
        self.lost.clone()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        held.stop_renewal();
        if tokio::runtime::Handle::try_current().is_err() {
            held.release_blocking();
            return;
        }
        let name = self.name.clone();
        crate::background::spawn(async move {
            if let Err(e) = held.release().await {
                tracing::debug!(lock = %name, error = %e, "background release failed; the TTL will free the lock");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{ManualClock, SentAt};
    use crate::lost::LossNotifier;

    /// A lease whose backend keeps its notifier elsewhere: nothing to do.
    #[derive(Debug)]
    struct Kept;

    #[async_trait]
    impl HeldLock for Kept {
        async fn renew(&self) -> Result<()> {
            Ok(())
        }
        async fn release(self: Box<Self>) -> Result<()> {
            Ok(())
        }
        fn abandon(self: Box<Self>) {}
    }

    /// Once nobody can fire the loss any more (the backend dropped its
    /// notifier, as etcd's guard does after `abandon`), `lost()` resolves
    /// `Released`; the guard, its `Held` views and every cloned signal say
    /// the lock is gone at once, although the validity has time left.
    #[tokio::test(flavor = "current_thread")]
    async fn every_view_of_a_grant_agrees_once_its_notifier_is_gone() {
        let clock = Arc::new(ManualClock::new());
        let ttl = Duration::from_secs(30);
        let validity = Validity::from_sent(&SentAt::now_on(clock), ttl);
        let notifier = LossNotifier::new();
        let guard = session_guard(
            LockName::new("views/agree").unwrap(),
            FencingToken(7),
            "views/agree".to_owned(),
            ttl,
            notifier.signal(),
            Box::new(Kept),
            Some(validity.clone()),
        );
        let held = guard.held_view();
        let signal = guard.lost_signal();
        assert!(guard.is_held() && held.is_held() && !signal.is_lost());
        assert_eq!(guard.health(), LockHealth::Held);

        drop(notifier);
        let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost());
        assert_eq!(lost.await.expect("resolved"), LostReason::Released);
        assert!(validity.is_valid(), "the local deadline is still ahead");
        assert!(!guard.is_held(), "the guard says held after lost()");
        assert!(!held.is_held(), "a Held view says held after lost()");
        assert!(signal.is_lost(), "a cloned signal says held after lost()");
        assert_eq!(signal.reason(), Some(LostReason::Released));
        assert_eq!(guard.health(), LockHealth::Lost(LostReason::Released));
        assert_eq!(guard.remaining_validity(), Some(Duration::ZERO));
    }

    /// A lease that another holder took: its release says `NotHeld`.
    #[derive(Debug)]
    struct TakenAway;

    #[async_trait]
    impl HeldLock for TakenAway {
        async fn renew(&self) -> Result<()> {
            Err(Error::not_held("taken away"))
        }

        async fn release(self: Box<Self>) -> Result<()> {
            Err(Error::not_held("taken away"))
        }

        fn abandon(self: Box<Self>) {}
    }

    #[tokio::test]
    async fn releasing_a_lock_taken_away_is_lease_lost_on_every_backend() {
        let guard = session_guard(
            LockName::new("taken").unwrap(),
            FencingToken(1),
            "taken".into(),
            Duration::from_secs(1),
            LossNotifier::new().signal(),
            Box::new(TakenAway),
            None,
        );
        let err = guard.release().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    }
}
