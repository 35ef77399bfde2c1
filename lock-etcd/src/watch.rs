//! Waiting for one key to be deleted.
//!
//! A watch that starts at a past revision is "unsynced" in etcd: its events
//! come from a server loop that runs every 100 ms, which is what makes
//! etcd's own Mutex hand over at about 10 per second per waiter. A watch
//! whose start revision is ahead of the store's is synced and woken at
//! once. [`DeletionWatch::open`] reports the revision the watch was created
//! at, so callers can watch from "now" and check the gap themselves.

use etcd_client::{EventType, WatchFilterType, WatchOptions};
use lock_core::Result;

use crate::hub::{Heard, HubWatch, WatchHub};
use crate::rpc::{Retry, Rpc};

/// How a wait for a deletion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The key was deleted (the revision of the answer that said so).
    Deleted(i64),
    /// The watch ended (compaction, a broken stream, a member without a
    /// leader): read the state again and decide.
    Recheck,
}

/// A watch for the deletion of one key.
#[derive(Debug)]
pub(crate) struct DeletionWatch {
    watch: Option<HubWatch>,
    created_rev: i64,
}

impl DeletionWatch {
    /// Watches `key` for deletion from revision `start`, or from now when
    /// `start` is `None`. Returns once etcd confirmed the watch.
    pub(crate) async fn open(
        hub: &WatchHub,
        rpc: &Rpc,
        op: &str,
        key: &str,
        start: Option<i64>,
    ) -> Result<Self> {
        let mut options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        if let Some(start) = start {
            options = options.with_start_revision(start);
        }
        // The stream of the previous attempt, if it went unanswered.
        let unanswered = std::sync::Mutex::new(None);
        let (watch, created_rev) = rpc
            .call(op, Retry::Idempotent, |_, attempt| {
                let options = options.clone();
                let unanswered = &unanswered;
                async move {
                    let stale = unanswered.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let (true, Some(generation)) = (attempt > 1, stale) {
                        hub.reset(generation).await;
                    }
                    let mut watch = hub.watch(key, options).await?;
                    *unanswered.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(watch.generation());
                    match watch.next().await {
                        Heard::Answer(created) if created.canceled() => {
                            // Start revision compacted: the caller re-reads.
                            tracing::debug!(key, reason = created.cancel_reason(), "watch refused");
                            Ok((None, 0))
                        }
                        Heard::Answer(created) => {
                            let rev = created.header().map_or(0, |h| h.revision());
                            Ok((Some(watch), rev))
                        }
                        Heard::StreamClosed => Err(etcd_client::Error::WatchError(
                            "watch stream closed before the watch was created".into(),
                        )),
                    }
                }
            })
            .await?;
        Ok(DeletionWatch { watch, created_rev })
    }

    /// The store revision when the watch was created: it reports every
    /// deletion after this revision.
    pub(crate) fn created_rev(&self) -> i64 {
        self.created_rev
    }

    /// Waits until the key is deleted or the watch ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a deletion not yet received stays in the stream.
    pub(crate) async fn deleted(&mut self) -> Woken {
        let Some(watch) = self.watch.as_mut() else {
            return Woken::Recheck;
        };
        loop {
            match watch.next().await {
                Heard::Answer(response) => {
                    if response
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                    {
                        return Woken::Deleted(response.header().map_or(0, |h| h.revision()));
                    }
                    if response.canceled() {
                        tracing::debug!(
                            reason = response.cancel_reason(),
                            "watch canceled by etcd"
                        );
                        self.watch = None;
                        return Woken::Recheck;
                    }
                }
                Heard::StreamClosed => {
                    self.watch = None;
                    return Woken::Recheck;
                }
            }
        }
    }
}

/// Watches for the deletion of any of several keys: the entries a shared
/// waiter waits for, or the one predecessor of a mutex waiter.
#[derive(Debug)]
pub(crate) struct DeletionWatches {
    watches: Vec<DeletionWatch>,
}

impl DeletionWatches {
    /// Watches every key of `keys` from now, all opened at once on the
    /// shared stream (one round trip, however many keys).
    pub(crate) async fn open(hub: &WatchHub, rpc: &Rpc, op: &str, keys: &[&str]) -> Result<Self> {
        let opening = keys
            .iter()
            .map(|key| DeletionWatch::open(hub, rpc, op, key, None));
        let watches = futures::future::try_join_all(opening).await?;
        Ok(DeletionWatches { watches })
    }

    /// The newest revision any of the watches was created at: every
    /// deletion after it is reported.
    pub(crate) fn created_rev(&self) -> i64 {
        self.watches
            .iter()
            .map(DeletionWatch::created_rev)
            .max()
            .unwrap_or(0)
    }

    /// Waits until one of the keys is deleted or one of the watches ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a deletion not yet received stays in its stream.
    pub(crate) async fn deleted(&mut self) -> Woken {
        if self.watches.is_empty() {
            return Woken::Recheck;
        }
        let waits = self
            .watches
            .iter_mut()
            .map(|watch| Box::pin(watch.deleted()));
        futures::future::select_all(waits).await.0
    }
}
