//! An acquisition in flight, undone in the background if it is abandoned.
//!
//! Dropping an `acquire` future (or giving up at its deadline) may leave
//! our entry in the wait queue, or even a lock key whose grant we never saw
//! (the reply was lost). The guard here runs the release script for our
//! owner id and waiter id in a spawned task, so neither blocks others beyond
//! the TTL. Both deletes are owner-checked: nobody else's state is touched.

use std::sync::Arc;

use crate::keys::LockKeys;
use crate::servers::Servers;

/// Cleans up an unfinished acquisition when dropped, unless disarmed.
#[derive(Debug)]
pub(crate) struct AcquireCleanup {
    cleanup: Option<(Arc<Servers>, LockKeys, String, String)>,
}

impl AcquireCleanup {
    /// Arms the clean-up of `owner` and `waiter` (may be `""`).
    pub(crate) fn new(servers: &Arc<Servers>, keys: &LockKeys, owner: &str, waiter: &str) -> Self {
        AcquireCleanup {
            cleanup: Some((
                servers.clone(),
                keys.clone(),
                owner.to_owned(),
                waiter.to_owned(),
            )),
        }
    }

    /// Nothing to clean up: we got the lock, or the server said no before
    /// we queued.
    pub(crate) fn disarm(&mut self) {
        self.cleanup = None;
    }

    /// Cleans up now and waits for it (at most a request timeout): an
    /// acquisition that gives up has left the queue when it returns, so
    /// a process that exits right after does not block the next waiter.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the clean-up runs as background work and goes on.
    pub(crate) async fn finish(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        let within = cleanup.0.request_timeout;
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

/// Removes our lock key and queue entry, if they are still ours.
async fn clean_up((servers, keys, owner, waiter): (Arc<Servers>, LockKeys, String, String)) {
    if let Err(e) = servers.release(&keys, &owner, &waiter).await {
        tracing::debug!(key = %keys.owner, error = %e, "clean-up of an abandoned acquisition failed; its queue entry expires after one TTL");
    }
}
