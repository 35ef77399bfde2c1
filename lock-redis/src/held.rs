//! A held lock: owner-checked renewal every TTL/3, owner-checked release,
//! and the lost signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use lock_core::renewal::{RenewalTask, Validity, spawn_renewal};
use lock_core::{
    Error, FencingToken, HeldLock, LockGuard, LockName, LossNotifier, LostReason, Result,
};
use tokio::time::Instant;

use crate::keys::LockKeys;
use crate::servers::{Granted, Request, Servers};

/// Builds the guard of a granted acquisition and starts its renewal.
pub(crate) fn guard(servers: Arc<Servers>, request: &Request<'_>, granted: Granted) -> LockGuard {
    let notifier = LossNotifier::new();
    let validity = Validity::starting(granted.sent, request.ttl);
    let renewal = spawn_renewal(request.ttl, validity.clone(), notifier.clone(), {
        let servers = servers.clone();
        let name = request.name.clone();
        let keys = request.keys.clone();
        let owner = granted.owner.clone();
        let ttl = request.ttl;
        Box::new(move || {
            let (servers, name, keys, owner) =
                (servers.clone(), name.clone(), keys.clone(), owner.clone());
            async move { servers.renew(&name, &keys, &owner, ttl).await }.boxed()
        })
    });
    let held = RedisHeld {
        servers,
        name: request.name.clone(),
        keys: request.keys.clone(),
        owner: granted.owner,
        token: granted.token,
        ttl: request.ttl,
        notifier: notifier.clone(),
        validity: validity.clone(),
        version: AtomicU64::new(0),
        renewal: Some(renewal),
    };
    LockGuard::new(
        request.name.clone(),
        FencingToken(granted.token),
        request.keys.owner.clone(),
        request.ttl,
        notifier.signal(),
        Box::new(held),
    )
    .with_validity(validity)
}

/// The Redis side of a [`LockGuard`].
#[derive(Debug)]
struct RedisHeld {
    servers: Arc<Servers>,
    name: LockName,
    keys: LockKeys,
    owner: String,
    token: u64,
    ttl: Duration,
    notifier: LossNotifier,
    validity: Validity,
    /// Version of the last proclaimed election value.
    version: AtomicU64,
    renewal: Option<RenewalTask>,
}

impl RedisHeld {
    fn lost_already(&self) -> Option<Error> {
        let reason = self.notifier.signal().reason()?;
        Some(Error::lease_lost(format!(
            "lock {} (token {}) on {} at {} is no longer held: {reason}",
            self.name,
            self.token,
            self.servers.backend,
            self.servers.addrs()
        )))
    }
}

#[async_trait]
impl HeldLock for RedisHeld {
    async fn renew(&self) -> Result<()> {
        if let Some(lost) = self.lost_already() {
            return Err(lost);
        }
        let sent = Instant::now();
        match self
            .servers
            .renew(&self.name, &self.keys, &self.owner, self.ttl)
            .await
        {
            Ok(()) => {
                self.validity.renewed(sent, self.ttl);
                Ok(())
            }
            Err(e) => {
                if e.kind() == lock_core::ErrorKind::LeaseLost {
                    self.notifier
                        .fire(LostReason::RenewalFailed(e.message().to_owned()));
                }
                Err(e)
            }
        }
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        // Stop renewing first, so no renewal races the delete.
        drop(self.renewal.take());
        let result = self.servers.release(&self.keys, &self.owner, "").await;
        let was_lost = self.notifier.signal().reason();
        self.notifier.fire(LostReason::Released);
        match result {
            Ok(true) => {
                tracing::debug!(backend = self.servers.backend, lock = %self.name, token = self.token, "released");
                Ok(())
            }
            Ok(false) => Err(Error::not_held(format!(
                "lock {} (token {}) was no longer held by this guard on {} at {}{}; nothing was deleted",
                self.name,
                self.token,
                self.servers.backend,
                self.servers.addrs(),
                was_lost.map(|r| format!(" ({r})")).unwrap_or_default()
            ))),
            Err(e) => Err(e),
        }
    }

    fn abandon(mut self: Box<Self>) {
        drop(self.renewal.take());
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if !self.keys.is_election() {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        if let Some(lost) = self.lost_already() {
            return Err(lost);
        }
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        let result = self
            .servers
            .proclaim(&self.name, &self.keys, &self.owner, value, version)
            .await;
        if let Err(e) = &result
            && e.kind() == lock_core::ErrorKind::LeaseLost
        {
            self.notifier.fire(LostReason::Deleted);
        }
        result
    }
}
