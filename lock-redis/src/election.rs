//! Leader election on Redis: a lock in the `election:` key space whose
//! holder keeps a leader record (owner, token, value, version) beside it.
//!
//! The record is written by the same script that takes the lock, so no one
//! ever sees a leader without its value; proclaim and resign publish on the
//! election's channel. Observers listen on that channel and re-read the
//! record on every message, and every TTL/3 in case a message was lost.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{LeaderSource, observe_leaders};
use distlock_core::{Access, Candidacy, LeaderInfo, LeaderStream, Leadership, LockName, Result};
use futures::future::select_all;

use crate::keys::Space;
use crate::servers::Servers;
use crate::wakeups::{ChannelWatch, subscribed};

/// Waits until leader of `name`, publishing `value`.
pub(crate) async fn campaign(
    servers: &Arc<Servers>,
    name: &LockName,
    bid: Candidacy,
) -> Result<Leadership> {
    let guard = servers.acquire(
        Space::Election,
        Access::Write,
        name,
        &bid.options,
        Some(&bid.value),
    );
    Ok(Leadership::new(guard.await?, bid.value))
}

/// Follows the leaders of `name`: the current one, then every change. An
/// error is yielded once; a retryable one is followed by more leaders, any
/// other ends the stream.
pub(crate) async fn observe(servers: &Arc<Servers>, name: &LockName) -> Result<LeaderStream> {
    if servers.layout == crate::Layout::Plain {
        return Err(crate::plain::lacks("elections"));
    }
    let channel = servers.keys.of(Space::Election, name).leader_channel;
    // Listen before the first read, so no change falls between them.
    let watches: Vec<_> = servers
        .nodes
        .iter()
        .map(|n| n.wakeups().subscribe(&channel))
        .collect();
    subscribed(&watches, servers.quorum, servers.request_timeout).await;
    let source = RecordSource {
        servers: servers.clone(),
        name: name.clone(),
        watches,
    };
    let reread = (servers.default_ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(2));
    Ok(observe_leaders(source, reread))
}

/// The leader record of one election, and its channel on every server.
struct RecordSource {
    servers: Arc<Servers>,
    name: LockName,
    watches: Vec<ChannelWatch>,
}

#[async_trait]
impl LeaderSource for RecordSource {
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn read(&mut self) -> Result<Option<LeaderInfo>> {
        self.servers.leader(&self.name).await
    }

    /// A message on any server's channel since the last wait; the watches
    /// remember messages, so none is missed while the record is read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message not yet taken stays for the next call.
    async fn changed(&mut self) {
        select_all(self.watches.iter_mut().map(|w| Box::pin(w.changed()))).await;
    }
}
