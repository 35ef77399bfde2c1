//! A held lock or leadership: release, renew, proclaim, and the monitor
//! that fires the lost signal.
//!
//! The guard is lost when its lease is (keepalive answered TTL 0, or could
//! not be renewed before the local validity deadline), or when its key is
//! deleted or recreated behind its back: `Revoked` when someone else ended
//! it while its lease should still be alive (the key was broken with
//! `force_release`, or the lease revoked), `Deleted` otherwise. Release
//! deletes the key only if it still has our create revision (one Txn), so
//! a stale guard never deletes a key that is not its own.
//!
//! Why a session guard and not `raw::leased_guard`: an etcd lease outlives
//! the lock it was granted for. A released lock returns its lease to the
//! backend's pool for the next acquisition (one round trip saved), and the
//! lease's renewal and lost signal belong to the [`PooledLease`], not to one
//! guard. `leased_guard` ties a lease's renewal to one guard and ends it
//! with that guard, so the guard here is built with `raw::session_guard`
//! and the lease's own validity.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{HeldLock, LossNotifier, Validity};
use distlock_core::{Error, FencingToken, LockGuard, LockName, LostReason, LostSignal, Result};
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::task::JoinHandle;
use tokio::time::sleep;
use tracing::Instrument;

use crate::backend::Inner;
use crate::ends;
use crate::keys::Space;
use crate::lease::PooledLease;
use crate::queue::Won;
use crate::rpc::Retry;
use crate::watch::{DeletionWatch, Woken};

/// The monitor opens its watch this long after the acquisition (at most),
/// replaying from the acquisition revision: a lock released sooner never
/// costs a watch, and a deletion is still seen within TTL/3.
const MONITOR_DELAY: Duration = Duration::from_millis(100);
/// Pause before the monitor retries after a broken watch or failed read.
const MONITOR_RETRY: Duration = Duration::from_millis(100);

/// Builds the guard of a won acquisition and starts its monitor.
pub(crate) fn guard(inner: Arc<Inner>, space: Space, name: LockName, won: Won) -> LockGuard {
    let notifier = LossNotifier::new();
    let Won {
        key,
        rev,
        seen_at,
        lease,
        reusable,
    } = won;
    let span = tracing::debug_span!("etcd.held", backend = "etcd", lock = %name, token = rev);
    let delay = MONITOR_DELAY.min(lease.ttl() / 10);
    let watched = Watched {
        key: key.clone(),
        rev,
        seen_at,
        lease: lease.id(),
        validity: lease.validity().clone(),
    };
    let monitor = Monitor {
        inner: inner.clone(),
        watched,
        delay,
        lease_lost: lease.lost_signal(),
        notifier: notifier.clone(),
    };
    let monitor = tokio::spawn(async move { monitor.run().await }.instrument(span));
    let ttl = lease.ttl();
    let validity = lease.validity().clone();
    let held = EtcdHeld {
        inner,
        space,
        name: name.clone(),
        key: key.clone(),
        rev,
        lease: Some(lease),
        reusable,
        notifier: notifier.clone(),
        monitor,
    };
    distlock_core::raw::session_guard(
        name,
        FencingToken(u64::try_from(rev).unwrap_or(0)),
        key,
        ttl,
        notifier.signal(),
        Box::new(held),
        Some(validity),
    )
}

/// The backend side of a held lock or leadership.
#[derive(Debug)]
struct EtcdHeld {
    inner: Arc<Inner>,
    space: Space,
    name: LockName,
    key: String,
    rev: i64,
    lease: Option<PooledLease>,
    /// Whether the lease may go back to the pool after a confirmed release.
    reusable: bool,
    notifier: LossNotifier,
    monitor: JoinHandle<()>,
}

impl EtcdHeld {
    fn what(&self) -> String {
        format!(
            "{} {:?} (token {})",
            self.space.noun(),
            self.name.as_str(),
            self.rev
        )
    }

    /// The compare that holds while our key is still ours.
    fn is_ours(&self) -> Compare {
        Compare::create_revision(self.key.clone(), CompareOp::Equal, self.rev)
    }

    /// Why our key is not ours any more although the guard had not seen
    /// it go: while our lease lives, only someone else can have deleted it.
    fn taken_away(lease: Option<&PooledLease>) -> LostReason {
        lease
            .and_then(|lease| lease.lost_signal().reason())
            .unwrap_or(LostReason::Revoked)
    }

    fn lost_error(&self, reason: &LostReason) -> Error {
        Error::lease_lost(format!(
            "{} at etcd {} is no longer held ({reason}); nothing was changed",
            self.what(),
            self.inner.rpc.endpoints()
        ))
    }
}

impl Drop for EtcdHeld {
    fn drop(&mut self) {
        self.monitor.abort();
    }
}

#[async_trait]
impl HeldLock for EtcdHeld {
    async fn renew(&self) -> Result<()> {
        if let Some(reason) = self.notifier.signal().reason() {
            return Err(self.lost_error(&reason));
        }
        match &self.lease {
            Some(lease) => {
                let held = Some((&self.name, self.rev.unsigned_abs()));
                distlock_core::raw::observe_renewal("etcd", held, lease.renew_now()).await
            }
            None => Err(Error::not_held(format!("{} was released", self.what()))),
        }
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        self.monitor.abort();
        let lost_before = self.notifier.signal().reason();
        // Delete our key only while it has our create revision: a key of
        // the same name written later (a late retry of an acquisition on
        // this lease) is not ours to delete. `succeeded` says whether ours
        // was still there.
        let op = format!("release {}", self.what());
        let release = Txn::new()
            .when([self.is_ours()])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
        let outcome = self
            .inner
            .rpc
            .call(&op, Retry::Idempotent, |client, attempt| {
                let release = release.clone();
                async move {
                    let resp = client.kv_client().txn(release).await?;
                    let revision = resp.header().map_or(ends::UNKNOWN, |h| h.revision());
                    Ok((resp.succeeded(), attempt, revision))
                }
            })
            .await;
        match &outcome {
            Ok((true, _, revision)) => ends::key_deleted(&self.key, *revision),
            Ok((false, 1, _)) => {}
            // A retry, or no answer: an attempt may have deleted it.
            Ok((false, ..)) | Err(_) => ends::key_deleted(&self.key, ends::UNKNOWN),
        }
        let outcome = outcome.map(|(succeeded, attempt, _)| (succeeded, attempt));
        let lease = self.lease.take();
        let result = match outcome {
            Ok((true, 1)) if lost_before.is_none() && self.reusable => {
                // Confirmed: the lease now holds no key and can serve again.
                if let Some(lease) = lease {
                    self.inner.pool.put(lease);
                }
                Ok(())
            }
            Ok((true, _)) => {
                self.inner
                    .pool
                    .revoke_in_background(lease.into_iter().collect());
                Ok(())
            }
            // A retry after an attempt whose answer was lost finds the key
            // gone; most likely that attempt deleted it.
            Ok((false, attempt)) if attempt > 1 && lost_before.is_none() => {
                self.inner
                    .pool
                    .revoke_in_background(lease.into_iter().collect());
                Ok(())
            }
            Ok((false, _)) => {
                let reason = lost_before.unwrap_or_else(|| Self::taken_away(lease.as_ref()));
                self.inner
                    .pool
                    .revoke_in_background(lease.into_iter().collect());
                self.notifier.fire(reason.clone());
                Err(self.lost_error(&reason))
            }
            Err(e) => {
                self.inner
                    .pool
                    .revoke_in_background(lease.into_iter().collect());
                Err(e)
            }
        };
        self.notifier.fire(LostReason::Released);
        tracing::debug!(lock = %self.name, token = self.rev, ok = result.is_ok(), "etcd lock released");
        result
    }

    fn abandon(mut self: Box<Self>) {
        // Dropping the lease stops its keepalive; etcd expires it after the TTL.
        self.lease = None;
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if self.space != Space::Election {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        if let Some(reason) = self.notifier.signal().reason() {
            return Err(self.lost_error(&reason));
        }
        let lease_id = self.lease.as_ref().map_or(0, PooledLease::id);
        let txn = Txn::new().when([self.is_ours()]).and_then([TxnOp::put(
            self.key.clone(),
            value.to_vec(),
            Some(PutOptions::new().with_lease(lease_id)),
        )]);
        let op = format!("proclaim a new value for {}", self.what());
        // Not retried: a proclaim that got through and one that did not
        // must not be confused with "no longer leader".
        let resp = self
            .inner
            .rpc
            .call(&op, Retry::Once, |client, _| {
                let txn = txn.clone();
                async move { client.kv_client().txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            Ok(())
        } else {
            let reason = Self::taken_away(self.lease.as_ref());
            self.notifier.fire(reason.clone());
            Err(self.lost_error(&reason))
        }
    }
}

/// The held key the monitor watches, and the lease it was written under.
struct Watched {
    key: String,
    rev: i64,
    seen_at: i64,
    lease: i64,
    validity: Validity,
}

/// How our key went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// Deleted.
    Deleted,
    /// Deleted and written again: not the key we hold.
    Replaced,
}

/// Watches a held key for as long as the lock is held: a task per held
/// lock, so its size is paid per lock. The steps that run once or rarely
/// (the first delay, opening a watch, a re-read, finding out why the key
/// went) are boxed, so the task keeps only the wait on the watch.
struct Monitor {
    inner: Arc<Inner>,
    watched: Watched,
    delay: Duration,
    lease_lost: LostSignal,
    notifier: LossNotifier,
}

impl Monitor {
    /// Fires the guard's lost signal when the lease is lost or our key is
    /// deleted. It borrows the monitor: a task that owns the monitor and
    /// awaits this keeps one copy of it (an `async fn` taking `self` by
    /// value would keep two).
    async fn run(&self) {
        let reason = tokio::select! {
            reason = self.lease_lost.lost() => reason,
            reason = self.key_gone() => reason,
        };
        self.notifier.fire(reason);
    }

    async fn key_gone(&self) -> LostReason {
        Box::pin(sleep(self.delay)).await;
        let gone = until_key_gone(&self.inner, &self.watched).await;
        Box::pin(why_gone(&self.inner, &self.watched, gone)).await
    }
}

/// Why our key went: `Revoked` if someone else ended it while our lease
/// was alive (an operator deleted the key, or revoked the lease before
/// it could expire), `Deleted` if that cannot be told.
async fn why_gone(inner: &Inner, watched: &Watched, gone: Gone) -> LostReason {
    if gone == Gone::Replaced {
        return LostReason::Deleted;
    }
    let left = crate::lease::time_left(&inner.rpc, watched.lease).await;
    match left {
        // The lease lives: the key was deleted on its own.
        Ok(Some(_)) => LostReason::Revoked,
        // The lease ended while our keepalives still vouched for it, so it
        // cannot have expired: it was revoked.
        Ok(None) if !watched.validity.remaining().is_zero() => LostReason::Revoked,
        Ok(None) => LostReason::Expired,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the lease of the deleted held key");
            LostReason::Deleted
        }
    }
}

/// Returns once our key (with create revision `rev`) is gone.
async fn until_key_gone(inner: &Inner, watched: &Watched) -> Gone {
    let mut seen_at = watched.seen_at;
    loop {
        // Boxed, as every step but the wait: see `Monitor`.
        if let Some(mut watch) = Box::pin(watch_from(inner, watched, seen_at)).await
            && let Woken::Deleted(_) = watch.deleted().await
        {
            return Gone::Deleted;
        }
        Box::pin(sleep(MONITOR_RETRY)).await;
        match Box::pin(read_key(inner, watched)).await {
            Read::Gone(gone) => return gone,
            Read::Ours { revision } => seen_at = revision,
            Read::Unknown => {}
        }
    }
}

/// Opens a watch on our key from the revision after `seen_at`; `None`
/// when it could not be opened (the caller re-reads the key).
async fn watch_from(inner: &Inner, watched: &Watched, seen_at: i64) -> Option<DeletionWatch> {
    let op = format!("watch held key {}", watched.key);
    let opened =
        DeletionWatch::open(&inner.hub, &inner.rpc, &op, &watched.key, Some(seen_at + 1)).await;
    opened
        .inspect_err(|e| tracing::debug!(error = %e, "could not watch the held key; re-reading"))
        .ok()
}

/// What a read of our key found.
enum Read {
    Gone(Gone),
    /// Still ours, as of this revision.
    Ours {
        revision: i64,
    },
    /// The read failed.
    Unknown,
}

async fn read_key(inner: &Inner, watched: &Watched) -> Read {
    let key = watched.key.as_str();
    let op = format!("read held key {key}");
    let read = inner
        .rpc
        .call(&op, Retry::Idempotent, |client, _| async move {
            client.kv_client().get(key, None).await
        })
        .await;
    match read {
        Ok(resp) => match resp.kvs().first() {
            None => Read::Gone(Gone::Deleted),
            Some(kv) if kv.create_revision() != watched.rev => Read::Gone(Gone::Replaced),
            Some(_) => Read::Ours {
                revision: resp.header().map_or(watched.seen_at, |h| h.revision()),
            },
        },
        Err(e) => {
            tracing::debug!(error = %e, "could not read the held key; retrying");
            Read::Unknown
        }
    }
}
