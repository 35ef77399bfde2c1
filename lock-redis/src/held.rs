//! A held lock's round trips: owner-checked renewal, release and proclaim.
//! distlock-core keeps the lease (validity, renewal every TTL/3, lost signal).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{Grant, Lease, LossNotifier};
use distlock_core::{Error, LockGuard, LockName, LostReason, Result};

use crate::keys::LockKeys;
use crate::servers::{Granted, RenewFailure, Request, Servers};

/// Builds the guard of a granted acquisition; distlock-core starts its renewal.
/// Fails with `LeaseLost` if the grant's validity ran out while acquiring.
pub(crate) fn guard(
    servers: Arc<Servers>,
    request: &Request<'_>,
    granted: Granted,
) -> Result<LockGuard> {
    let grant = Grant::new(
        request.name.clone(),
        granted.token,
        request.held_key().to_owned(),
        request.ttl,
        granted.sent,
    );
    let notifier = LossNotifier::new();
    let grant = grant
        .with_notifier(notifier.clone())
        .renewed_by(&servers.renewer);
    let lease = RedisLease {
        notifier,
        servers,
        name: request.name.clone(),
        keys: request.keys.clone(),
        owner: granted.owner,
        token: granted.token,
        ttl: request.ttl,
        version: AtomicU64::new(0),
    };
    distlock_core::raw::leased_guard(grant, lease)
}

/// The Redis side of a held lock or leadership.
#[derive(Debug)]
struct RedisLease {
    /// The guard's lost signal, fired with `Revoked` when a renewal learns
    /// that the lock was broken.
    notifier: LossNotifier,
    servers: Arc<Servers>,
    name: LockName,
    keys: LockKeys,
    owner: String,
    token: u64,
    ttl: Duration,
    /// Version of the last proclaimed election value.
    version: AtomicU64,
}

#[async_trait]
impl Lease for RedisLease {
    async fn renew(&self) -> Result<()> {
        match self
            .servers
            .renew(&self.name, &self.keys, &self.owner, self.ttl)
            .await
        {
            Ok(()) => Ok(()),
            Err(RenewFailure::Revoked(e)) => {
                self.notifier.fire(LostReason::Revoked);
                Err(e)
            }
            Err(RenewFailure::Other(e)) => Err(e),
        }
    }

    async fn release(&self) -> Result<()> {
        match self.servers.release(&self.keys, &self.owner, "").await? {
            true => {
                tracing::debug!(backend = self.servers.backend, lock = %self.name, token = self.token, "released");
                Ok(())
            }
            false => Err(Error::not_held(format!(
                "lock {} (token {}) was no longer held by this guard on {} at {}; nothing was deleted",
                self.name,
                self.token,
                self.servers.backend,
                self.servers.addrs(),
            ))),
        }
    }

    /// Releases over blocking connections: a guard dropped where no
    /// runtime is running still frees the lock at once.
    fn release_blocking(&self) {
        self.servers.release_blocking(&self.keys, &self.owner);
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if !self.keys.is_election() {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        self.servers
            .proclaim(&self.name, &self.keys, &self.owner, value, version)
            .await
    }
}
