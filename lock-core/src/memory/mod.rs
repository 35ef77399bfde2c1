//! An in-process backend: the faithful reference implementation of the contract.
//!
//! All clones of a [`MemoryBackend`] share one lock table, as clients of one
//! server would. Leases expire on Tokio's clock, so tests can run with paused
//! time. It is FIFO, supports election, semaphores and read-write locks (one
//! FIFO queue per name, granted by [`blockers`](crate::raw::blockers)),
//! and its tokens are process-local.
//!
//! It reports everything an operator asks for: [`inspect`](LockBackend::inspect)
//! gives the holder (description, token, key, when it took the lock, lease
//! left) and every waiter's description in queue order; `list` every name
//! held or waited for; `force_release` evicts the holder at once, and its
//! guard's lost signal fires [`LostReason::Revoked`](crate::LostReason::Revoked)
//! before the call returns. `inspect` and `force_release` look at the lock
//! of that name, or, when nobody holds or waits for it, at the election.
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

use crate::access::Access;
use crate::admin::{AdminCapabilities, HolderInfo, ListOptions, ListPage, LockStatus};
use crate::backend::{AcquireRequest, LockBackend};
use crate::capabilities::{Capabilities, FencingStrength};
use crate::clock::{LeaseClock, SentAt, TokioClock};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lease::{Grant, Lease};
use crate::lost::LossNotifier;
use crate::name::LockName;
use crate::options::AcquireOptions;
use crate::renewer::Renewer;

use table::{Request, Space, Table};

/// An error of `kind` during `operation` in the memory backend, made
/// through [`Site`](crate::raw::Site) as every backend's are.
pub(crate) fn memory_error(
    kind: crate::ErrorKind,
    operation: impl std::fmt::Display,
    detail: impl std::fmt::Display,
) -> Error {
    let operation = operation.to_string();
    crate::site::Site::new("memory", "memory://", &operation).error(kind, detail)
}
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
    /// The holder description of grants whose options set none.
    holder: Option<Arc<str>>,
    /// Renews the leases of every lock this backend grants, from one task per runtime.
    renewer: Renewer,
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
            holder: None,
            renewer: Renewer::new(),
        }
    }

    /// Sets the holder description stored with grants whose
    /// [`AcquireOptions::holder`] is unset (default `host:pid`).
    pub fn with_holder(mut self, holder: impl Into<Arc<str>>) -> Self {
        self.holder = Some(holder.into());
        self
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
            .with_shared(true, true)
            .with_cross_process(false)
            .with_admin(AdminCapabilities::all())
    }

    /// The space `name` is operated on in: its lock, unless only its
    /// election is in use.
    fn space_of(&self, name: &LockName) -> (Space, LockStatus) {
        let lock = self.table.inspect(Space::Lock, name);
        if lock.is_held() || lock.waiting > 0 {
            return (Space::Lock, lock);
        }
        let election = self.table.inspect(Space::Election, name);
        if election.is_held() || election.waiting > 0 {
            return (Space::Election, election);
        }
        (Space::Lock, lock)
    }

    /// Acquires `name` in `space`, publishing `value` for elections, inside
    /// distlock-core's `distlock.acquire` span and metrics.
    async fn acquire_in(
        &self,
        space: Space,
        access: Access,
        name: &LockName,
        options: &AcquireOptions,
        value: Option<Vec<u8>>,
    ) -> Result<LockGuard> {
        let grant = async {
            let ttl = options.ttl_for(self.default_ttl, &Self::caps())?;
            let notifier = LossNotifier::new();
            let request = Request {
                access,
                ttl,
                wait: options.wait,
                notifier: notifier.clone(),
                value,
                description: options.holder_description(self.holder.as_deref()),
            };
            let grant = self.table.acquire(space, name, request).await?;
            let sent = SentAt::from_tokio_instant(self.clock.clone(), grant.granted_at);
            let key = table::key_of(space, name, grant.lease);
            let lease = MemoryLease {
                table: self.table.clone(),
                space,
                name: name.clone(),
                grant,
                ttl,
            };
            LockGuard::leased(
                Grant::new(name.clone(), grant.token, key, ttl, sent)
                    .with_notifier(notifier)
                    .renewed_by(&self.renewer),
                lease,
            )
        };
        crate::raw::observe_acquire("memory", name, grant).await
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

    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        let (space, access) = match request.access {
            None => (Space::Lock, Access::Write),
            Some(access @ Access::Permit(_)) => (Space::Semaphore, access),
            Some(access) => (Space::RwLock, access),
        };
        self.acquire_in(space, access, request.name, request.options, None)
            .await
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        Ok(self.space_of(name).1)
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        Ok(options.page(self.table.list()))
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it does not wait, so it has either evicted the holder or
    /// not started.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        let (space, _) = self.space_of(name);
        Ok(self.table.force_release(space, name))
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
            return Err(memory_error(
                crate::ErrorKind::Unsupported,
                format_args!("proclaim on {}", self.name),
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
            Err(memory_error(
                crate::ErrorKind::NotHeld,
                format_args!("release lock {} (token {})", self.name, self.grant.token),
                "it was no longer held by this guard; nothing was released",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::{Candidacy, ElectionBackend};
    use crate::lost::LostReason;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    /// A name used only as an election is operated on as one: inspect shows
    /// its leader, and a break ends the leadership with `Revoked` at once.
    #[tokio::test]
    async fn an_election_in_use_is_inspected_and_broken_by_its_name() {
        let backend = MemoryBackend::new().with_holder("scheduler-1");
        let lead = backend
            .campaign(&name("sched"), Candidacy::new("me"))
            .await
            .unwrap();
        let status = backend.inspect(&name("sched")).await.unwrap();
        let holder = status.holder.expect("the leader");
        assert_eq!(holder.token, lead.token());
        assert_eq!(status.primitive, crate::Primitive::Election);
        // The leader is shown by its value, not the holder label.
        assert_eq!(holder.description.as_deref(), Some("me"));
        let evicted = backend.force_release(&name("sched")).await.unwrap();
        assert_eq!(evicted.map(|h| h.token), Some(lead.token()));
        assert!(
            lead.lost_signal().is_lost(),
            "fired before force_release returned"
        );
        assert_eq!(lead.lost().await, LostReason::Revoked);
        assert_eq!(backend.leader(&name("sched")).await.unwrap(), None);
        assert!(!backend.inspect(&name("sched")).await.unwrap().is_held());
    }
}
