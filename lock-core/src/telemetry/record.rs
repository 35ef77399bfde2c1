//! Recording the metrics and spans that [`super`] names: what backends and
//! the guard call, kept out of the public `telemetry` module.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use metrics::{counter, gauge, histogram};
use tracing::Instrument;
use tracing::field::Empty;

use super::*;
use crate::error::{ErrorKind, Result};
use crate::guard::LockGuard;
use crate::lost::{LostReason, LostSignal};
use crate::name::LockName;

tokio::task_local! {
    /// The backend whose acquisition is running, so that the guard and its
    /// renewal, built inside it, carry the backend's label.
    static BACKEND: &'static str;
}

/// Runs `acquire`, a backend's acquisition of `name`, inside the
/// `distlock.acquire` span, and records its result, its wait and the
/// hold that follows.
///
/// Every backend calls it from its `acquire` (and its campaign), with
/// the name its [`Capabilities`](crate::Capabilities) give.
///
/// # Cancel safety
///
/// As `acquire`: cancelling drops it, and the attempt counts as `cancelled`.
pub async fn observe_acquire<F>(
    backend: &'static str,
    name: &LockName,
    acquire: F,
) -> Result<LockGuard>
where
    F: Future<Output = Result<LockGuard>>,
{
    let span = tracing::info_span!("distlock.acquire", backend, lock = %name, token = Empty, outcome = Empty);
    let mut attempt = Attempt::start(backend);
    let result = BACKEND
        .scope(backend, acquire)
        .instrument(span.clone())
        .await;
    let outcome = match &result {
        Ok(_) => "acquired",
        Err(e) => match e.kind() {
            ErrorKind::WouldBlock => "would_block",
            ErrorKind::Timeout => "timeout",
            _ => "error",
        },
    };
    attempt.finish(outcome);
    span.record("outcome", outcome);
    let guard = result?;
    span.record("token", guard.token().get());
    Ok(guard.observed(backend))
}

/// The backend label of the acquisition running now, if any.
pub(crate) fn current_backend() -> Option<&'static str> {
    BACKEND.try_with(|backend| *backend).ok()
}

/// An acquisition in progress: counted in [`WAITING`] until it ends.
struct Attempt {
    backend: &'static str,
    started: Instant,
    finished: bool,
}

impl Attempt {
    fn start(backend: &'static str) -> Self {
        gauge!(WAITING, "backend" => backend).increment(1.0);
        Attempt {
            backend,
            started: Instant::now(),
            finished: false,
        }
    }

    fn finish(&mut self, outcome: &'static str) {
        self.finished = true;
        let backend = self.backend;
        gauge!(WAITING, "backend" => backend).decrement(1.0);
        counter!(ACQUISITIONS, "backend" => backend, "result" => outcome).increment(1);
        histogram!(ACQUIRE_WAIT, "backend" => backend, "result" => outcome)
            .record(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.finished {
            self.finish("cancelled");
        }
    }
}

/// A held lock as metrics see it: counted in [`HELD`] from the grant until
/// the lock is released, lost or its guard dropped, whichever comes first.
#[derive(Debug)]
pub(crate) struct HoldMetrics {
    state: Arc<HoldState>,
}

#[derive(Debug)]
struct HoldState {
    backend: &'static str,
    started: Instant,
    ended: AtomicBool,
}

impl HoldState {
    fn end(&self, reason: Option<&LostReason>) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let backend = self.backend;
        gauge!(HELD, "backend" => backend).decrement(1.0);
        histogram!(HOLD_TIME, "backend" => backend).record(self.started.elapsed().as_secs_f64());
        if let Some(reason) = reason.filter(|r| **r != LostReason::Released) {
            counter!(LOSSES, "backend" => backend, "reason" => reason_label(reason)).increment(1);
        }
    }
}

impl HoldMetrics {
    /// Starts counting a hold, and hooks into `lost` so that a loss is
    /// counted when it happens rather than when the guard is dropped (a
    /// hook, not a task: a task per held lock would cost more memory than
    /// the rest of the guard).
    pub(crate) fn start(backend: &'static str, lost: LostSignal) -> Self {
        gauge!(HELD, "backend" => backend).increment(1.0);
        let state = Arc::new(HoldState {
            backend,
            started: Instant::now(),
            ended: AtomicBool::new(false),
        });
        let ends = state.clone();
        lost.on_lost(move |reason| ends.end(Some(reason)));
        HoldMetrics { state }
    }

    /// The backend label.
    pub(crate) fn backend(&self) -> &'static str {
        self.state.backend
    }
}

impl Drop for HoldMetrics {
    fn drop(&mut self) {
        self.state.end(None);
    }
}

/// Runs one lease renewal inside the `distlock.renew` span and records its
/// result and latency. `held` is the lock and token the lease carries;
/// `None` for a lease renewed between locks (etcd's pooled leases).
///
/// distlock-core's renewal schedule calls it for leases it keeps; a backend that
/// renews a lease of its own wraps each renewal in it.
///
/// # Cancel safety
///
/// As `renew`; a cancelled renewal is recorded as nothing.
pub async fn observe_renewal<F>(
    backend: &'static str,
    held: Option<(&LockName, u64)>,
    renew: F,
) -> Result<()>
where
    F: Future<Output = Result<()>>,
{
    let span = tracing::debug_span!(
        "distlock.renew",
        backend,
        lock = Empty,
        token = Empty,
        outcome = Empty
    );
    if let Some((name, token)) = held {
        span.record("lock", tracing::field::display(name));
        span.record("token", token);
    }
    let started = Instant::now();
    let result = renew.instrument(span.clone()).await;
    let outcome = match &result {
        Ok(()) => "ok",
        Err(e) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => "lost",
        Err(_) => "error",
    };
    span.record("outcome", outcome);
    counter!(RENEWALS, "backend" => backend, "result" => outcome).increment(1);
    histogram!(RENEWAL_TIME, "backend" => backend).record(started.elapsed().as_secs_f64());
    result
}

/// Counts a held lock whose renewals started failing while its lease
/// still had validity left: call it when
/// [`LossNotifier::renewal_failing`](crate::raw::LossNotifier::renewal_failing)
/// returns `true`. distlock-core's renewal schedule does for the leases it
/// renews; a backend that renews a session counts its own.
pub fn count_renewal_failing(backend: &'static str) {
    counter!(RENEWAL_FAILING, "backend" => backend).increment(1);
}

/// Runs a release of `name` inside the `distlock.release` span.
pub(crate) async fn observe_release<F>(
    backend: &'static str,
    name: &LockName,
    token: u64,
    release: F,
) -> Result<()>
where
    F: Future<Output = Result<()>>,
{
    let span =
        tracing::debug_span!("distlock.release", backend, lock = %name, token, outcome = Empty);
    let result = release.instrument(span.clone()).await;
    let outcome = match &result {
        Ok(()) => "released",
        Err(e) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => "not_held",
        Err(_) => "error",
    };
    span.record("outcome", outcome);
    result
}
