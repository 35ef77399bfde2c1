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
#[cfg(feature = "testing")]
mod testing;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::LockBackend;
use crate::capabilities::{Capabilities, FencingStrength};
use crate::clock::{LeaseClock, SentAt, TokioClock};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lease::{Grant, Lease};
use crate::lost::LossNotifier;
use crate::name::LockName;
use crate::options::AcquireOptions;

use table::{Space, Table};
#[cfg(feature = "testing")]
pub use testing::expire_key;

/// The default lease TTL of the in-memory backend.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// An in-process lock service. Clones share the same locks.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    table: Arc<Table>,
    default_ttl: Duration,
    /// The table expires leases on Tokio's clock, so validity is measured on it too.
    clock: Arc<dyn LeaseClock>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A new, empty lock service.
    pub fn new() -> Self {
        let table = Arc::new(Table::default());
        #[cfg(feature = "testing")]
        testing::register(&table);
        MemoryBackend {
            table,
            default_ttl: DEFAULT_TTL,
            clock: Arc::new(TokioClock::new()),
        }
    }

    /// Sets the default TTL used when acquire options leave it unset.
    pub fn with_default_ttl(mut self, ttl: Duration) -> Result<Self> {
        self.default_ttl = crate::options::ttl_for(ttl, &Self::caps())?;
        Ok(self)
    }

    /// Ends the lease of whoever holds `name` right now, as a server-side
    /// expiry would. Returns whether there was a holder. For fault tests
    /// (feature `testing`).
    #[cfg(feature = "testing")]
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
        crate::raw::observe_acquire("memory", name, self.grant_in(space, name, options, value))
            .await
    }

    async fn grant_in(
        &self,
        space: Space,
        name: &LockName,
        options: &AcquireOptions,
        value: Option<Vec<u8>>,
    ) -> Result<LockGuard> {
        let ttl = options.ttl_for(self.default_ttl, &Self::caps())?;
        let notifier = LossNotifier::new();
        let grant = self
            .table
            .acquire(space, name, ttl, options.wait, notifier.clone(), value)
            .await?;
        let sent = SentAt::from_instant_on(self.clock.clone(), grant.granted_at);
        let key = table::key_of(space, name, grant.lease);
        let lease = MemoryLease {
            table: self.table.clone(),
            space,
            name: name.clone(),
            grant,
            ttl,
        };
        LockGuard::leased(
            Grant::new(name.clone(), grant.token, key, ttl, sent).with_notifier(notifier),
            lease,
        )
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

/// The memory backend's round trips on one held lock or leadership.
#[derive(Debug)]
struct MemoryLease {
    table: Arc<Table>,
    space: Space,
    name: LockName,
    grant: table::Grant,
    ttl: Duration,
}

#[async_trait]
impl Lease for MemoryLease {
    async fn renew(&self) -> Result<()> {
        self.table
            .renew(self.space, &self.name, self.grant.lease, self.ttl)
    }

    async fn release(&self) -> Result<()> {
        self.release_blocking_checked()
    }

    fn release_blocking(&self) {
        let _ = self.release_blocking_checked();
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

impl MemoryLease {
    fn release_blocking_checked(&self) -> Result<()> {
        if self.table.release(self.space, &self.name, self.grant.lease) {
            Ok(())
        } else {
            Err(Error::not_held(format!(
                "lock {} was no longer held by this guard (token {}); nothing was released",
                self.name, self.grant.token
            )))
        }
    }
}
