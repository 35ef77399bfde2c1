//! Idle leases kept alive for the next acquisition on the same backend.
//!
//! Granting a lease is a raft write, as much as the acquisition itself.
//! After a release whose delete etcd confirmed on the first attempt, of a
//! lock joined on the first attempt (or a `try_lock` that found the lock
//! held on its first attempt), the lease
//! carries no key, and no earlier attempt can still write one; it goes
//! here, and the next acquisition with the same TTL takes it, so an
//! uncontended acquire costs one round trip. After a retry or any outcome
//! in doubt it is revoked instead: an attempt applied late would put a key
//! on it that the pool's keepalive would keep alive for good. A lease is
//! never shared: it holds at most one key at any time, so two guards can
//! never both "own" a lock through one lease (etcd issues 11364, 11391).
//! Leases that are lost, stale, or idle for too long are revoked instead.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::keepalive::KeepAliveHub;
use crate::lease::{PooledLease, revoke_id};
use crate::rpc::Rpc;

/// At most this many idle leases per backend.
const MAX_IDLE: usize = 8;
/// Idle leases older than this are revoked when the pool is next used.
const MAX_IDLE_TIME: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Idle {
    lease: PooledLease,
    since: Instant,
}

/// The idle leases of one backend.
#[derive(Debug)]
pub(crate) struct LeasePool {
    rpc: Rpc,
    keepalive: Arc<KeepAliveHub>,
    idle: Mutex<Vec<Idle>>,
}

impl LeasePool {
    pub(crate) fn new(rpc: Rpc, keepalive: Arc<KeepAliveHub>) -> Arc<Self> {
        Arc::new(LeasePool {
            rpc,
            keepalive,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A fresh idle lease asked with `secs` seconds, or one newly granted
    /// by `by` at the latest; `true` for an idle one (which may have ended
    /// on the server since its last keepalive).
    pub(crate) async fn take_or_grant(
        &self,
        secs: i64,
        by: Option<Instant>,
    ) -> distlock_core::Result<(PooledLease, bool)> {
        let (taken, stale) = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let stale = drain_stale(&mut idle);
            let taken = idle
                .iter()
                .rposition(|i| i.lease.asked_secs() == secs)
                .map(|at| idle.swap_remove(at).lease);
            (taken, stale)
        };
        self.revoke_in_background(stale);
        match taken {
            Some(lease) => Ok((lease, true)),
            None => Ok((
                PooledLease::grant(&self.rpc, &self.keepalive, secs, by).await?,
                false,
            )),
        }
    }

    /// Keeps a lease that holds no key for later, or revokes it if the pool
    /// is full or the lease is not fresh.
    pub(crate) fn put(&self, lease: PooledLease) {
        let rejected = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let mut rejected = drain_stale(&mut idle);
            if lease.is_fresh() && idle.len() < MAX_IDLE {
                idle.push(Idle {
                    lease,
                    since: Instant::now(),
                });
            } else {
                rejected.push(lease);
            }
            rejected
        };
        self.revoke_in_background(rejected);
    }

    /// Revokes leases without waiting (if a runtime is there; otherwise they
    /// expire after their TTL).
    pub(crate) fn revoke_in_background(&self, leases: Vec<PooledLease>) {
        if leases.is_empty() {
            return;
        }
        let rpc = self.rpc.clone();
        distlock_core::raw::spawn_background(async move {
            for lease in leases {
                let id = lease.id();
                drop(lease);
                let _ = revoke_id(&rpc, id).await;
            }
        });
    }
}

impl Drop for LeasePool {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        self.revoke_in_background(idle.into_iter().map(|i| i.lease).collect());
    }
}

/// Removes leases that are lost, no longer fresh, or idle too long.
fn drain_stale(idle: &mut Vec<Idle>) -> Vec<PooledLease> {
    let now = Instant::now();
    let mut stale = Vec::new();
    let mut i = 0;
    while i < idle.len() {
        if !idle[i].lease.is_fresh() || now.duration_since(idle[i].since) > MAX_IDLE_TIME {
            stale.push(idle.swap_remove(i).lease);
        } else {
            i += 1;
        }
    }
    stale
}
