//! Leader election on Redis: a lock in the `election:` key space whose
//! holder keeps a leader record (owner, token, value, version) beside it.
//!
//! The record is written by the same script that takes the lock, so no one
//! ever sees a leader without its value; proclaim and resign publish on the
//! election's channel. Observers listen on that channel and re-read the
//! record on every message, and every TTL/3 in case a message was lost.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::LeaderFilter;
use distlock_core::{Access, Candidacy, LeaderStream, Leadership, LockName, Result};
use futures::StreamExt;
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

/// What an observer has yielded so far.
struct Observer {
    servers: Arc<Servers>,
    name: LockName,
    watches: Vec<ChannelWatch>,
    filter: LeaderFilter,
    first: bool,
}

/// Follows the leaders of `name`: the current one, then every change.
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
    let observer = Observer {
        servers: servers.clone(),
        name: name.clone(),
        watches,
        filter: LeaderFilter::new(),
        first: true,
    };
    let reread = (servers.default_ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(2));
    Ok(futures::stream::unfold(observer, move |mut o| async move {
        loop {
            if !o.first {
                let changed = select_all(o.watches.iter_mut().map(|w| Box::pin(w.changed())));
                tokio::select! {
                    _ = changed => {}
                    () = tokio::time::sleep(reread) => {}
                }
            }
            o.first = false;
            match o.servers.leader(&o.name).await {
                Ok(Some(leader)) if o.filter.admit(&leader) => return Some((Ok(leader), o)),
                Ok(Some(_)) => {}
                Ok(None) => {}
                Err(e) => return Some((Err(e), o)),
            }
        }
    })
    .boxed())
}
