//! Background lease renewal with a local validity deadline.
//!
//! Backends whose leases are renewed per lock (Redis `PEXPIRE`, etcd
//! keepalive, the in-memory backend) share this loop: renew every TTL/3, track
//! how long the lease is certainly valid on a monotonic clock, and fire the
//! lost signal as soon as the lease is gone or can no longer be vouched for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::error::{ErrorKind, Result};
use crate::lost::{LossNotifier, LostReason};

/// Clock drift allowance subtracted from every lease: 1 % of the TTL plus 2 ms,
/// as in the Redlock analysis.
pub fn drift_allowance(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Until when a lease is certainly valid, measured on the local monotonic clock.
///
/// Set from the instant a renewal (or the acquisition) was *sent*, not when
/// its reply arrived: `sent + ttl - drift`. The server may have started the
/// TTL any time after we sent, so this never overestimates.
#[derive(Debug, Clone)]
pub struct Validity {
    until: Arc<Mutex<Instant>>,
}

impl Validity {
    /// Validity of a lease granted by a request sent at `sent`.
    pub fn starting(sent: Instant, ttl: Duration) -> Self {
        Validity {
            until: Arc::new(Mutex::new(valid_until(sent, ttl))),
        }
    }

    /// The instant after which the lease can no longer be vouched for.
    pub fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a successful renewal sent at `sent`. Never moves the deadline back.
    pub fn renewed(&self, sent: Instant, ttl: Duration) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(valid_until(sent, ttl));
    }

    /// Whether the deadline is still ahead.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.until()
    }
}

fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift_allowance(ttl))
}

/// A renewal call: resolves `Ok` when the server extended the lease by its TTL,
/// `Err` of kind `LeaseLost` or `NotHeld` when the lease is gone, or another
/// error (retried) when the outcome is unknown.
pub type RenewFn = Box<dyn FnMut() -> BoxFuture<'static, Result<()>> + Send>;

/// A running renewal loop; it stops when dropped.
#[derive(Debug)]
pub struct RenewalTask {
    handle: JoinHandle<()>,
}

impl Drop for RenewalTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Starts renewing every `ttl / 3`.
///
/// The loop fires `notifier` and stops when renewal reports the lease gone
/// ([`LostReason::RenewalFailed`]), or when `validity` runs out before a
/// renewal succeeds ([`LostReason::DeadlineMissed`]). Failed renewals of
/// unknown outcome are retried every `ttl / 10` until then.
pub fn spawn_renewal(
    ttl: Duration,
    validity: Validity,
    notifier: LossNotifier,
    mut renew: RenewFn,
) -> RenewalTask {
    let period = (ttl / 3).max(Duration::from_millis(1));
    let retry = (ttl / 10).max(Duration::from_millis(1));
    let handle = tokio::spawn(async move {
        let mut next = Instant::now() + period;
        loop {
            let deadline = validity.until();
            if next >= deadline {
                next = deadline;
            }
            sleep_until(next).await;
            if notifier.is_fired() {
                return;
            }
            let deadline = validity.until();
            if Instant::now() >= deadline {
                notifier.fire(LostReason::DeadlineMissed);
                return;
            }
            let sent = Instant::now();
            match timeout_at(deadline, renew()).await {
                Ok(Ok(())) => {
                    validity.renewed(sent, ttl);
                    next = sent + period;
                }
                Ok(Err(e)) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => {
                    notifier.fire(LostReason::RenewalFailed(e.to_string()));
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "lease renewal failed; retrying");
                    next = Instant::now() + retry;
                }
                Err(_) => {
                    notifier.fire(LostReason::DeadlineMissed);
                    return;
                }
            }
        }
    });
    RenewalTask { handle }
}
