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
pub(crate) struct Pending {
    cleanup: Option<(Arc<Servers>, LockKeys, String, String)>,
}

impl Pending {
    /// Arms the clean-up of `owner` and `waiter` (may be `""`).
    pub(crate) fn new(servers: &Arc<Servers>, keys: &LockKeys, owner: &str, waiter: &str) -> Self {
        Pending {
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
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some((servers, keys, owner, waiter)) = self.cleanup.take() else {
            return;
        };
        lock_core::raw::spawn_background(async move {
            if let Err(e) = servers.release(&keys, &owner, &waiter).await {
                tracing::debug!(key = %keys.owner, error = %e, "clean-up of an abandoned acquisition failed; its queue entry expires after one TTL");
            }
        });
    }
}
