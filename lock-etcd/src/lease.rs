//! One etcd lease: granted, kept alive in the background, and watched for loss.
//!
//! Keepalive runs on the backend's distlock-core renewal schedule (every TTL/3,
//! with a local validity deadline; one task per runtime for all leases). Each renewal sends one request on the backend's
//! shared keepalive stream ([`KeepAliveHub`]) and waits for its answer: a
//! TTL of 0 means the lease is gone (the lost signal fires); a closed or
//! broken stream is reopened on the next try, and if that cannot happen
//! before the validity deadline the lost signal fires too.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::{LossNotifier, RenewalTask, SentAt, Validity};
use distlock_core::{Error, LostReason, LostSignal, Result};
use futures::FutureExt;
use tokio::time::Instant;

use crate::ends;
use crate::errors::is_lease_gone;
use crate::keepalive::KeepAliveHub;
use crate::rpc::{Retry, Rpc};

/// A granted lease. Dropping it stops the keepalive; it then expires on
/// the server after its TTL (revoke it first to free its keys at once).
#[derive(Debug)]
pub(crate) struct PooledLease {
    id: i64,
    /// The TTL etcd granted (it may raise a short TTL to its minimum).
    ttl: Duration,
    /// The whole seconds asked for; pooled leases are matched on this.
    asked_secs: i64,
    validity: Validity,
    lost: LossNotifier,
    keepalive: Arc<KeepAliveHub>,
    attempt_timeout: Duration,
    _renewal: RenewalTask,
}

impl PooledLease {
    /// Grants a lease of `secs` seconds (by `by` at the latest) and starts
    /// keeping it alive on `keepalive`'s shared stream.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a grant cancelled after etcd made it leaves a lease
    /// nobody knows of, which expires after its TTL.
    pub(crate) async fn grant(
        rpc: &Rpc,
        keepalive: &Arc<KeepAliveHub>,
        secs: i64,
        by: Option<Instant>,
    ) -> Result<PooledLease> {
        let sent = SentAt::now();
        let op = format!("grant a {secs} s lease");
        let granted = rpc
            .call_by(&op, Retry::Idempotent, by, |client, _| async move {
                client.lease_client().grant(secs, None).await
            })
            .await?;
        let id = granted.id();
        let ttl = Duration::from_secs(u64::try_from(granted.ttl().max(secs)).unwrap_or(1));
        let validity = Validity::from_sent(&sent, ttl);
        let lost = LossNotifier::new();
        let keepalive = keepalive.clone();
        let attempt_timeout = (ttl / 3).min(rpc.request_timeout());
        let renew = {
            let keepalive = keepalive.clone();
            Box::new(move || {
                let keepalive = keepalive.clone();
                async move {
                    let renewal = keepalive.renew(id, attempt_timeout);
                    distlock_core::raw::observe_renewal("etcd", None, renewal).await
                }
                .boxed()
            })
        };
        let renewal =
            keepalive
                .renewer()
                .schedule("etcd", ttl, validity.clone(), lost.clone(), renew);
        tracing::debug!(lease = %format_args!("{id:x}"), ?ttl, "etcd lease granted");
        Ok(PooledLease {
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
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled renewal counts for nothing, and its answer
    /// is discarded when it arrives.
    pub(crate) async fn renew_now(&self) -> Result<()> {
        if let Some(reason) = self.lost.signal().reason() {
            return Err(Error::lease_lost(format!(
                "lease {:x} is gone: {reason}",
                self.id
            )));
        }
        if !self.validity.is_valid() {
            self.lost.fire(LostReason::DeadlineMissed);
            return Err(Error::lease_lost(format!(
                "lease {:x} is gone: {}",
                self.id,
                LostReason::DeadlineMissed
            )));
        }
        let sent = SentAt::now_on(self.validity.clock().clone());
        let result = self.keepalive.renew(self.id, self.attempt_timeout).await;
        match result {
            // An answer after the validity deadline cannot vouch for the
            // lease: someone may already have been told it is gone.
            Ok(()) if self.validity.renewed_at(&sent, self.ttl) => Ok(()),
            Ok(()) => {
                self.lost.fire(LostReason::DeadlineMissed);
                Err(Error::lease_lost(format!(
                    "lease {:x} was renewed only after its validity had run out: {}",
                    self.id,
                    LostReason::DeadlineMissed
                )))
            }
            Err(e) => {
                if e.kind() == distlock_core::ErrorKind::LeaseLost {
                    self.lost.fire(LostReason::RenewalFailed(e.to_string()));
                }
                Err(e)
            }
        }
    }

    /// Revokes the lease, deleting every key attached to it. Stops renewal.
    ///
    /// # Cancel safety
    ///
    /// Cancelling may leave the lease unrevoked; renewal has stopped, so it
    /// expires after its TTL.
    pub(crate) async fn revoke(self, rpc: &Rpc) -> Result<()> {
        let id = self.id;
        drop(self);
        revoke_id(rpc, id).await
    }
}

/// Revokes lease `id`; a lease that is already gone counts as revoked.
///
/// # Cancel safety
///
/// Cancelling may leave the lease unrevoked (it then lives until its TTL
/// passes, or as long as something still renews it).
pub(crate) async fn revoke_id(rpc: &Rpc, id: i64) -> Result<()> {
    let op = format!("revoke lease {id:x}");
    let result = rpc
        .call(&op, Retry::Idempotent, |client, attempt| async move {
            match client.lease_client().revoke(id).await {
                Ok(resp) => Ok(Some(resp.header().map_or(ends::UNKNOWN, |h| h.revision()))),
                // Gone at the first try: it ended before we asked. At a
                // later one, an earlier try may have ended it.
                Err(err) if is_lease_gone(&err) => Ok((attempt > 1).then_some(ends::UNKNOWN)),
                Err(err) => Err(err),
            }
        })
        .await;
    match &result {
        Ok(Some(revision)) => ends::lease_revoked(id, *revision),
        Ok(None) => {}
        Err(e) => {
            ends::lease_revoked(id, ends::UNKNOWN);
            tracing::debug!(lease = %format_args!("{id:x}"), error = %e, "lease revoke failed; it will expire after its TTL");
        }
    }
    result.map(|_| ())
}

/// The time left on lease `id`, by etcd's count (whole seconds), or `None`
/// if the lease is gone.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
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
