//! The lease lifecycle every per-lock lease shares, owned by distlock-core.
//!
//! A backend supplies only its round trips (a [`Lease`]: renew, release,
//! proclaim) and what it was granted (a [`Grant`]). [`leased_guard`](crate::raw::leased_guard)
//! does the rest, the same way for every backend:
//!
//! - the validity deadline, counted from when the acquisition was sent, on a
//!   clock that keeps counting through suspend ([`SentAt`]);
//! - renewal (every TTL/3, sooner when little validity is left), on the
//!   backend's shared [`Renewer`] schedule;
//! - the lost signal, fired on renewal failure, on a missed deadline, or by
//!   the backend itself through the notifier it passes in the grant;
//! - owner-checked release, and a best-effort release from `Drop`.
//!
//! A grant whose validity has already run out (an acquisition that took
//! longer than its TTL) never becomes a guard: [`leased_guard`](crate::raw::leased_guard) refuses
//! it, releases it, and the caller gets `LeaseLost`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;

use crate::clock::SentAt;
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::guard::{HeldLock, LockGuard, session_guard};
use crate::lost::{LossNotifier, LostReason};
use crate::name::LockName;
use crate::renewer::{RenewalTask, Renewer};
use crate::telemetry;
use crate::validity::Validity;

/// A backend's round trips on one granted lease.
///
/// Each method is one owner-checked exchange with the server; retries,
/// deadlines and the lost signal are distlock-core's job.
///
/// # Cancel safety
///
/// distlock-core drops a `renew` future whose validity deadline passes, and a
/// user may drop a `release` or `proclaim`. Implementations must leave
/// nothing behind that a later call misreads (a stream one answer behind,
/// a half-sent request taken for the next one's reply): an outcome that was
/// cut short is unknown, never assumed.
#[async_trait]
pub trait Lease: fmt::Debug + Send + Sync + 'static {
    /// Extends the lease by its TTL from now.
    ///
    /// Returns `LeaseLost` or `NotHeld` when the lease is gone (it never
    /// re-acquires), and any other error when the outcome is unknown.
    async fn renew(&self) -> Result<()>;

    /// Deletes the lock if it is still ours.
    ///
    /// When the lock is no longer ours (it expired, an operator broke it
    /// with [`force_release`](crate::LockBackend::force_release), or
    /// another holder took it over) it deletes nothing and fails with
    /// `LeaseLost`, the kind the lost signal stands for, on every backend.
    /// distlock-core reports a `NotHeld` from here as `LeaseLost`: a lease is
    /// released once, so "not ours" can only mean taken away. `NotHeld` is
    /// for a guard this process already gave up itself.
    async fn release(&self) -> Result<()>;

    /// Replaces the value published with an election leadership, if the
    /// lease is still ours. Leases of plain locks keep the default.
    async fn proclaim(&self, _value: &[u8]) -> Result<()> {
        Err(Error::unsupported(
            "proclaim is only available on a leadership",
        ))
    }

    /// A best-effort release without an async runtime, for a guard dropped
    /// where none is running. The default does nothing: the TTL frees the lock.
    fn release_blocking(&self) {}
}

/// What an acquisition was granted.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The lock's name.
    pub name: LockName,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// The backend key (or path) that represents it.
    pub key: String,
    /// The TTL in force, after the backend's rounding.
    pub ttl: Duration,
    /// When the request that won the lease was sent.
    pub sent: SentAt,
    notifier: Option<LossNotifier>,
    renewer: Option<Renewer>,
}

impl Grant {
    /// A grant of `name` with `token`, represented by `key`, whose lease of
    /// `ttl` started no earlier than `sent`.
    pub fn new(
        name: LockName,
        token: impl Into<FencingToken>,
        key: impl Into<String>,
        ttl: Duration,
        sent: SentAt,
    ) -> Self {
        Grant {
            name,
            token: token.into(),
            key: key.into(),
            ttl,
            sent,
            notifier: None,
            renewer: None,
        }
    }

    /// Uses `notifier` as the guard's lost signal, so that the backend can
    /// fire it too (a watch saw the key deleted, a server expired the lease).
    pub fn with_notifier(mut self, notifier: LossNotifier) -> Self {
        self.notifier = Some(notifier);
        self
    }

    /// Renews the lease on `renewer`'s schedule, shared with the backend's
    /// other leases. Without one, the guard gets a schedule of its own: a
    /// task per held lock.
    pub fn renewed_by(mut self, renewer: &Renewer) -> Self {
        self.renewer = Some(renewer.clone());
        self
    }
}

impl From<u64> for FencingToken {
    fn from(token: u64) -> Self {
        FencingToken(token)
    }
}

impl LockGuard {
    /// The guard of `grant`, kept by distlock-core: validity, renewal of `lease`
    /// every TTL/3, and the lost signal.
    ///
    /// Fails with `LeaseLost` if the grant's validity has already run out
    /// (the acquisition took longer than the TTL); the lease is then
    /// released in the background, and no guard is ever handed out.
    pub(crate) fn leased(grant: Grant, lease: impl Lease) -> Result<LockGuard> {
        let lease: Arc<dyn Lease> = Arc::new(lease);
        let validity = Validity::from_sent(&grant.sent, grant.ttl);
        if !validity.is_valid() {
            let stale = lease.clone();
            if !crate::background::spawn(async move {
                let _ = stale.release().await;
            }) {
                lease.release_blocking();
            }
            return Err(Error::lease_lost(format!(
                "lock {} (token {}) was granted after its {} lease had already run out; \
                 it was released. Use a longer TTL, or look for what slows the acquisition",
                grant.name,
                grant.token,
                crate::duration::human_duration(grant.ttl)
            )));
        }
        let notifier = grant.notifier.clone().unwrap_or_default();
        let backend = telemetry::current_backend().unwrap_or("unknown");
        let renewer = grant.renewer.clone().unwrap_or_default();
        let renewal = renewer.schedule(backend, grant.ttl, validity.clone(), notifier.clone(), {
            let (lease, name, token) = (lease.clone(), grant.name.clone(), grant.token.get());
            Box::new(move || {
                let (lease, name) = (lease.clone(), name.clone());
                async move {
                    telemetry::observe_renewal(backend, Some((&name, token)), lease.renew()).await
                }
                .boxed()
            })
        });
        let held = Leased {
            backend,
            lease,
            name: grant.name.clone(),
            token: grant.token,
            ttl: grant.ttl,
            validity: validity.clone(),
            notifier: notifier.clone(),
            renewal: Some(renewal),
        };
        Ok(session_guard(
            grant.name,
            grant.token,
            grant.key,
            grant.ttl,
            notifier.signal(),
            Box::new(held),
            Some(validity),
        ))
    }
}

/// A lease kept by distlock-core: the backend's round trips plus validity,
/// renewal and the lost signal.
struct Leased {
    backend: &'static str,
    lease: Arc<dyn Lease>,
    name: LockName,
    token: FencingToken,
    ttl: Duration,
    validity: Validity,
    notifier: LossNotifier,
    renewal: Option<RenewalTask>,
}

impl fmt::Debug for Leased {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("lease", &self.lease)
            .field("token", &self.token)
            .field("remaining", &self.validity.remaining())
            .field("lost", &self.notifier.signal().reason())
            .finish()
    }
}

impl Leased {
    fn lost_error(&self, reason: &LostReason) -> Error {
        Error::lease_lost(format!(
            "lock {} (token {}) is no longer held: {reason}",
            self.name, self.token
        ))
    }

    /// Fails if the lock is already known to be gone.
    fn ensure_held(&self) -> Result<()> {
        if let Some(reason) = self.notifier.signal().reason() {
            return Err(self.lost_error(&reason));
        }
        if !self.validity.is_valid() {
            self.notifier.fire(LostReason::DeadlineMissed);
            return Err(self.lost_error(&LostReason::DeadlineMissed));
        }
        Ok(())
    }

    fn stop(&mut self) {
        drop(self.renewal.take());
    }
}

fn is_gone(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld)
}

#[async_trait]
impl HeldLock for Leased {
    async fn renew(&self) -> Result<()> {
        self.ensure_held()?;
        let sent = SentAt::now_on(self.validity.clock().clone());
        let renewal = self.lease.renew();
        match telemetry::observe_renewal(
            self.backend,
            Some((&self.name, self.token.get())),
            renewal,
        )
        .await
        {
            Ok(()) if self.validity.renewed_at(&sent, self.ttl) => Ok(()),
            Ok(()) => {
                self.notifier.fire(LostReason::DeadlineMissed);
                Err(self.lost_error(&LostReason::DeadlineMissed))
            }
            Err(e) => {
                if is_gone(&e) {
                    self.notifier.fire(LostReason::RenewalFailed(e.to_string()));
                }
                Err(e)
            }
        }
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        // Stop renewing first, so no renewal races the delete.
        self.stop();
        // A lease is released once, so one that is not ours was taken away:
        // that is `LeaseLost` on every backend (see `Lease::release`).
        let result = self.lease.release().await.map_err(|e| match e.kind() {
            ErrorKind::NotHeld => e.with_kind(ErrorKind::LeaseLost),
            _ => e,
        });
        self.notifier.fire(LostReason::Released);
        result
    }

    fn abandon(mut self: Box<Self>) {
        self.stop();
    }

    fn stop_renewal(&mut self) {
        self.stop();
    }

    fn release_blocking(mut self: Box<Self>) {
        self.stop();
        self.lease.release_blocking();
        self.notifier.fire(LostReason::Released);
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.ensure_held()?;
        let result = self.lease.proclaim(value).await;
        if let Err(e) = &result
            && is_gone(e)
        {
            self.notifier.fire(LostReason::Deleted);
        }
        result
    }
}
