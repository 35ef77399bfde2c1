//! An acquisition in flight, undone in the background if it is abandoned.
//!
//! A cancelled or timed-out acquire may leave its queue entry, or even a
//! grant whose answer it never saw. Both are rows with the attempt's owner
//! id, so one owner-checked delete removes them; if even that cannot run,
//! the rows expire after one TTL.

use std::sync::Arc;

use uuid::Uuid;

use crate::backend::Inner;

/// Cleans up an unfinished acquisition when dropped, unless disarmed.
#[derive(Debug)]
pub(crate) struct AcquireCleanup {
    cleanup: Option<(Arc<Inner>, Uuid)>,
}

impl AcquireCleanup {
    /// Arms the clean-up of `owner`'s entry.
    pub(crate) fn new(inner: &Arc<Inner>, owner: Uuid) -> Self {
        AcquireCleanup {
            cleanup: Some((inner.clone(), owner)),
        }
    }

    /// Nothing to clean up: we got the lock, or never queued.
    pub(crate) fn disarm(&mut self) {
        self.cleanup = None;
    }

    /// Cleans up now and waits for it (at most a request timeout), so that
    /// an acquisition that gives up has left the queue when it returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the clean-up runs as background work and goes on.
    pub(crate) async fn finish(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        let within = cleanup.0.config.request_timeout;
        distlock_core::raw::finish_in_background(within, clean_up(cleanup)).await;
    }
}

impl Drop for AcquireCleanup {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            distlock_core::raw::spawn_background(clean_up(cleanup));
        }
    }
}

async fn clean_up((inner, owner): (Arc<Inner>, Uuid)) {
    if let Err(e) = crate::lease::release(&inner, &owner.to_string()).await {
        tracing::debug!(error = %e, "clean-up of an abandoned acquisition failed; its entry expires after one TTL");
    }
}
