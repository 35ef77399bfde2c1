//! An in-process backend: the faithful reference implementation of the contract.
//!
//! All clones of a [`MemoryBackend`] share one lock table, as clients of one
//! server would. Leases expire on Tokio's clock, so tests can run with paused
//! time. It is FIFO, supports election, and its tokens are process-local.
//!
//! Use it for unit tests of code that takes a lock and for examples; it does
//! not coordinate separate processes.

mod election;
mod table;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;

use crate::backend::LockBackend;
use crate::capabilities::{Capabilities, FencingStrength};
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::guard::{HeldLock, LockGuard};
use crate::lost::{LossNotifier, LostReason};
use crate::name::LockName;
use crate::options::AcquireOptions;
use crate::renewal::{RenewalTask, Validity, spawn_renewal};

use table::{Grant, Space, Table};

/// The default lease TTL of the in-memory backend.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// An in-process lock service. Clones share the same locks.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    table: Arc<Table>,
    default_ttl: Duration,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A new, empty lock service.
    pub fn new() -> Self {
        MemoryBackend {
            table: Arc::new(Table::default()),
            default_ttl: DEFAULT_TTL,
        }
    }

    /// Sets the default TTL used when acquire options leave it unset.
    pub fn with_default_ttl(mut self, ttl: Duration) -> Result<Self> {
        crate::options::check_ttl(ttl)?;
        self.default_ttl = ttl;
        Ok(self)
    }

    /// Ends the lease of whoever holds `name` right now, as a server-side
    /// expiry would. Returns whether there was a holder. For fault tests.
    pub fn expire_now(&self, name: &LockName) -> bool {
        self.table.expire_holder(Space::Lock, name)
            | self.table.expire_holder(Space::Election, name)
    }

    fn caps() -> Capabilities {
        Capabilities::new("memory", FencingStrength::ProcessLocal)
            .with_fifo(true)
            .with_election(true)
            .with_cross_process(false)
    }

    async fn acquire_in(
        &self,
        space: Space,
        name: &LockName,
        options: &AcquireOptions,
        value: Option<Vec<u8>>,
    ) -> Result<LockGuard> {
        let ttl = options.effective_ttl(self.default_ttl)?;
        let notifier = LossNotifier::new();
        let grant = self
            .table
            .acquire(space, name, ttl, options.wait, notifier.clone(), value)
            .await?;
        let validity = Validity::starting(grant.granted_at, ttl);
        let renewal = spawn_renewal(ttl, validity.clone(), notifier.clone(), {
            let table = self.table.clone();
            let name = name.clone();
            Box::new(move || {
                let table = table.clone();
                let name = name.clone();
                async move { table.renew(space, &name, grant.lease, ttl) }.boxed()
            })
        });
        let held = MemoryHeld {
            table: self.table.clone(),
            space,
            name: name.clone(),
            grant,
            ttl,
            notifier: notifier.clone(),
            _renewal: renewal,
        };
        let key = table::key_of(space, name, grant.lease);
        Ok(LockGuard::new(
            name.clone(),
            FencingToken(grant.token),
            key,
            ttl,
            notifier.signal(),
            Box::new(held),
        )
        .with_validity(validity))
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn capabilities(&self) -> Capabilities {
        Self::caps()
    }

    fn default_ttl(&self) -> Duration {
        self.default_ttl
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<LockGuard> {
        self.acquire_in(Space::Lock, name, options, None).await
    }
}

/// The memory backend's handle on one held lock or leadership.
#[derive(Debug)]
struct MemoryHeld {
    table: Arc<Table>,
    space: Space,
    name: LockName,
    grant: Grant,
    ttl: Duration,
    notifier: LossNotifier,
    _renewal: RenewalTask,
}

#[async_trait]
impl HeldLock for MemoryHeld {
    async fn renew(&self) -> Result<()> {
        let result = self
            .table
            .renew(self.space, &self.name, self.grant.lease, self.ttl);
        if let Err(e) = &result {
            self.notifier.fire(LostReason::RenewalFailed(e.to_string()));
        }
        result
    }

    async fn release(self: Box<Self>) -> Result<()> {
        let released = self.table.release(self.space, &self.name, self.grant.lease);
        self.notifier.fire(LostReason::Released);
        if released {
            Ok(())
        } else {
            Err(Error::not_held(format!(
                "lock {} was no longer held by this guard (token {}); nothing was released",
                self.name, self.grant.token
            )))
        }
    }

    fn abandon(self: Box<Self>) {
        // Dropping the renewal task stops renewal; the lease runs out on its own.
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if self.space != Space::Election {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        self.table
            .proclaim(&self.name, self.grant.lease, value.to_vec())
    }
}
