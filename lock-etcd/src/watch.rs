//! Waiting for one key to be deleted: how a held lock notices that its key
//! was taken away.
//!
//! A watch that starts at a past revision is "unsynced" in etcd: its events
//! come from a server loop that runs every 100 ms. That delay is harmless
//! for noticing a lost key, and it lets the watch start right after the
//! revision the key was last seen at, so no deletion falls into a gap.

use distlock_core::Result;
use etcd_client::{EventType, WatchFilterType, WatchOptions};

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
        let watch = rpc
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
                            Ok(None)
                        }
                        Heard::Answer(_) => Ok(Some(watch)),
                        Heard::StreamClosed => Err(etcd_client::Error::WatchError(
                            "watch stream closed before the watch was created".into(),
                        )),
                    }
                }
            })
            .await?;
        Ok(DeletionWatch { watch })
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
