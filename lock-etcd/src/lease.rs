//! One etcd lease: granted, kept alive in the background, and watched for loss.
//!
//! Keepalive runs on lock-core's renewal loop (every TTL/3, with a local
//! validity deadline). Each renewal sends one request on the lease's
//! keepalive stream and waits for its answer: a TTL of 0 means the lease is
//! gone (the lost signal fires); a closed or broken stream is reopened on
//! the next try, and if that cannot happen before the validity deadline the
//! lost signal fires too.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use futures::FutureExt;
use lock_core::raw::LossNotifier;
use lock_core::raw::{RenewalTask, Validity, spawn_renewal};
use lock_core::{Error, LostSignal, Result};
use tokio::sync::Mutex;
use tokio::time::{Instant, timeout};

use crate::errors::{EtcdSite, is_lease_gone};
use crate::rpc::{Retry, Rpc};

/// A granted lease. Dropping it stops the keepalive; it then expires on
/// the server after its TTL (revoke it first to free its keys at once).
#[derive(Debug)]
pub(crate) struct Lease {
    id: i64,
    /// The TTL etcd granted (it may raise a short TTL to its minimum).
    ttl: Duration,
    /// The whole seconds asked for; pooled leases are matched on this.
    asked_secs: i64,
    validity: Validity,
    lost: LossNotifier,
    keepalive: Arc<Mutex<KeepAlive>>,
    attempt_timeout: Duration,
    _renewal: RenewalTask,
}

impl Lease {
    /// Grants a lease of `secs` seconds (by `by` at the latest) and starts
    /// keeping it alive.
    pub(crate) async fn grant(rpc: &Rpc, secs: i64, by: Option<Instant>) -> Result<Lease> {
        let sent = Instant::now();
        let op = format!("grant a {secs} s lease");
        let granted = rpc
            .call_by(&op, Retry::Idempotent, by, |client, _| async move {
                client.lease_client().grant(secs, None).await
            })
            .await?;
        let id = granted.id();
        let ttl = Duration::from_secs(u64::try_from(granted.ttl().max(secs)).unwrap_or(1));
        let validity = Validity::starting(sent, ttl);
        let lost = LossNotifier::new();
        let keepalive = Arc::new(Mutex::new(KeepAlive {
            rpc: rpc.clone(),
            id,
            stream: None,
            dirty: false,
        }));
        let attempt_timeout = (ttl / 3).min(rpc.request_timeout());
        let renew = {
            let keepalive = keepalive.clone();
            Box::new(move || {
                let keepalive = keepalive.clone();
                async move {
                    let renewal = async { keepalive.lock().await.renew(attempt_timeout).await };
                    lock_core::raw::observe_renewal("etcd", None, renewal).await
                }
                .boxed()
            })
        };
        let renewal = spawn_renewal(ttl, validity.clone(), lost.clone(), renew);
        tracing::debug!(lease = %format_args!("{id:x}"), ?ttl, "etcd lease granted");
        Ok(Lease {
            id,
            ttl,
            asked_secs: secs,
            validity,
            lost,
            keepalive,
            attempt_timeout,
            _renewal: renewal,
        })
    }

    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn asked_secs(&self) -> i64 {
        self.asked_secs
    }

    pub(crate) fn validity(&self) -> &Validity {
        &self.validity
    }

    /// Fires when the lease is gone or can no longer be vouched for.
    pub(crate) fn lost_signal(&self) -> LostSignal {
        self.lost.signal()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_fired()
    }

    /// Whether the lease is alive with at least half its TTL ahead, so a
    /// new holder can start on it.
    pub(crate) fn is_fresh(&self) -> bool {
        !self.is_lost() && self.validity.until() > Instant::now() + self.ttl / 2
    }

    /// Renews now, in addition to the background loop.
    pub(crate) async fn renew_now(&self) -> Result<()> {
        if let Some(reason) = self.lost.signal().reason() {
            return Err(Error::lease_lost(format!(
                "lease {:x} is gone: {reason}",
                self.id
            )));
        }
        let sent = Instant::now();
        let result = self
            .keepalive
            .lock()
            .await
            .renew(self.attempt_timeout)
            .await;
        match &result {
            Ok(()) => self.validity.renewed(sent, self.ttl),
            Err(e) if e.kind() == lock_core::ErrorKind::LeaseLost => {
                self.lost
                    .fire(lock_core::LostReason::RenewalFailed(e.to_string()));
            }
            Err(_) => {}
        }
        result
    }

    /// Revokes the lease, deleting every key attached to it. Stops renewal.
    pub(crate) async fn revoke(self, rpc: &Rpc) -> Result<()> {
        let id = self.id;
        drop(self);
        revoke_id(rpc, id).await
    }
}

/// Revokes lease `id`; a lease that is already gone counts as revoked.
pub(crate) async fn revoke_id(rpc: &Rpc, id: i64) -> Result<()> {
    let op = format!("revoke lease {id:x}");
    let result = rpc
        .call(&op, Retry::Idempotent, |client, _| async move {
            match client.lease_client().revoke(id).await {
                Err(err) if is_lease_gone(&err) => Ok(()),
                other => other.map(|_| ()),
            }
        })
        .await;
    if let Err(e) = &result {
        tracing::debug!(lease = %format_args!("{id:x}"), error = %e, "lease revoke failed; it will expire after its TTL");
    }
    result
}

/// The time left on lease `id`, by etcd's count (whole seconds), or `None`
/// if the lease is gone.
pub(crate) async fn time_left(rpc: &Rpc, id: i64) -> Result<Option<Duration>> {
    let op = format!("read the time left on lease {id:x}");
    let ttl = rpc
        .call(&op, Retry::Idempotent, |client, _| async move {
            match client.lease_client().time_to_live(id, None).await {
                Ok(resp) => Ok(resp.ttl()),
                Err(err) if is_lease_gone(&err) => Ok(-1),
                Err(err) => Err(err),
            }
        })
        .await?;
    Ok(u64::try_from(ttl).ok().map(Duration::from_secs))
}

/// The keepalive stream of one lease, opened on first use and reopened
/// after a failure.
///
/// Answers carry no request id: they are matched to requests by order. A
/// round trip cancelled between its send and its answer would leave that
/// answer for the next one, which would then count a renewal the server
/// made earlier as made at its own send time, and vouch for the lease past
/// its end. So a round trip marks the stream dirty before sending and
/// clean once it has read its answer, and a dirty stream is replaced.
struct KeepAlive {
    rpc: Rpc,
    id: i64,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// A round trip started on `stream` and did not finish.
    dirty: bool,
}

impl KeepAlive {
    /// One keepalive round trip. `LeaseLost` when etcd says the lease is
    /// gone; `Unavailable` (retried by the loop) when the stream broke.
    async fn renew(&mut self, attempt_timeout: Duration) -> Result<()> {
        let outcome = timeout(attempt_timeout, self.round_trip()).await;
        let op = format!("keep lease {:x} alive", self.id);
        let ctx = self.rpc.context(&op);
        let result = match outcome {
            Ok(result) => result.map_err(|e| ctx.client_error(e)),
            Err(_) => Err(ctx.timed_out(attempt_timeout)),
        };
        if result.is_err() {
            // Answers are matched to requests by order: start over.
            self.stream = None;
        }
        result
    }

    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled round trip leaves the stream dirty, and the
    /// next one opens a new stream.
    async fn round_trip(&mut self) -> std::result::Result<(), etcd_client::Error> {
        if self.dirty {
            self.stream = None;
            self.dirty = false;
        }
        match self.stream.as_mut() {
            None => {
                // Opening sends one keepalive and checks its answer (TTL > 0).
                let opened = self.rpc.client().lease_client().keep_alive(self.id).await?;
                self.stream = Some(opened);
                Ok(())
            }
            Some((keeper, stream)) => {
                self.dirty = true;
                keeper.keep_alive().await?;
                let answer = stream.message().await?;
                self.dirty = false;
                match answer {
                    Some(answer) if answer.ttl() > 0 => Ok(()),
                    Some(_) => Err(etcd_client::Error::LeaseKeepAliveError(
                        "lease not found: keepalive answered TTL 0".into(),
                    )),
                    None => Err(etcd_client::Error::WatchError(
                        "keepalive stream closed by the server".into(),
                    )),
                }
            }
        }
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAlive")
            .field("id", &self.id)
            .field("open", &self.stream.is_some())
            .field("dirty", &self.dirty)
            .finish()
    }
}
