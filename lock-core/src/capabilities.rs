//! What a backend can and cannot promise, declared as data.
//!
//! The conformance suite selects its cases from these, and users can check
//! them at run time (for example, refuse a backend whose fencing is not strong).

use std::time::Duration;

use crate::admin::AdminCapabilities;

/// How far a backend's fencing tokens can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencingStrength {
    /// Tokens come from a linearizable, replicated log and never go back
    /// (etcd revisions, ZooKeeper zxids).
    Strong,
    /// Tokens increase while the server keeps its data. A restart without
    /// fsync or a failover to a lagging replica can make them go back
    /// (Redis). Backends do the best they can, and say how.
    BestEffort,
    /// Tokens increase within one process only (the in-memory backend).
    ProcessLocal,
}

/// The capabilities of a lock backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Short backend name: `memory`, `file`, `etcd`, `redis`, `redlock`, `zk`.
    pub backend: &'static str,
    /// How strong the fencing tokens are.
    pub fencing: FencingStrength,
    /// Waiters acquire in the order they started waiting.
    pub fifo: bool,
    /// Leader election is implemented.
    pub election: bool,
    /// Semaphores ([`Access::Permit`](crate::Access::Permit)) are implemented.
    pub semaphore: bool,
    /// Read-write locks ([`Access::Read`](crate::Access::Read) and
    /// [`Access::Write`](crate::Access::Write)) are implemented.
    pub rwlock: bool,
    /// The lock works across processes (and machines, for networked
    /// backends). `false` means process-local (only `memory`): each process
    /// that connects gets a table of its own, so two processes both "hold"
    /// a name and get the same tokens. Code that coordinates processes
    /// should check it and refuse such a backend, as the `distlock` CLI
    /// does. [`FencingStrength::ProcessLocal`] says the same of the tokens.
    pub cross_process: bool,
    /// Guarded writes: the backend's server can commit a write of yours
    /// only while a lock is still held, checked atomically with the write
    /// (etcd, ZooKeeper, Redis and Redis Cluster; not Redlock, file or
    /// memory).
    pub guarded_writes: bool,
    /// Leases are renewed per lock (true) or per client session (false, ZooKeeper).
    pub per_lock_lease: bool,
    /// The shortest TTL the backend accepts.
    pub min_ttl: Duration,
    /// TTLs are rounded up to a multiple of this (etcd: whole seconds).
    pub ttl_granularity: Duration,
    /// What [`inspect`](crate::LockBackend::inspect) reports, and whether
    /// [`list`](crate::LockBackend::list) and
    /// [`force_release`](crate::LockBackend::force_release) work.
    pub admin: AdminCapabilities,
}

impl Capabilities {
    /// Capabilities with every optional promise off; backends switch on what they support.
    pub fn new(backend: &'static str, fencing: FencingStrength) -> Self {
        Capabilities {
            backend,
            fencing,
            fifo: false,
            election: false,
            semaphore: false,
            rwlock: false,
            cross_process: true,
            guarded_writes: false,
            per_lock_lease: true,
            min_ttl: crate::options::MIN_TTL,
            ttl_granularity: Duration::from_millis(1),
            admin: AdminCapabilities::default(),
        }
    }

    /// Sets [`fifo`](Self::fifo).
    pub fn with_fifo(mut self, fifo: bool) -> Self {
        self.fifo = fifo;
        self
    }

    /// Sets [`election`](Self::election).
    pub fn with_election(mut self, election: bool) -> Self {
        self.election = election;
        self
    }

    /// Sets [`semaphore`](Self::semaphore) and [`rwlock`](Self::rwlock).
    pub fn with_shared(mut self, semaphore: bool, rwlock: bool) -> Self {
        self.semaphore = semaphore;
        self.rwlock = rwlock;
        self
    }

    /// Whether `access` is implemented.
    pub fn supports(&self, access: crate::Access) -> bool {
        match access {
            crate::Access::Permit(_) => self.semaphore,
            _ => self.rwlock,
        }
    }

    /// Sets [`cross_process`](Self::cross_process).
    pub fn with_cross_process(mut self, cross_process: bool) -> Self {
        self.cross_process = cross_process;
        self
    }

    /// Sets [`guarded_writes`](Self::guarded_writes).
    pub fn with_guarded_writes(mut self, guarded_writes: bool) -> Self {
        self.guarded_writes = guarded_writes;
        self
    }

    /// Sets [`per_lock_lease`](Self::per_lock_lease).
    pub fn with_per_lock_lease(mut self, per_lock_lease: bool) -> Self {
        self.per_lock_lease = per_lock_lease;
        self
    }

    /// Sets [`admin`](Self::admin).
    pub fn with_admin(mut self, admin: AdminCapabilities) -> Self {
        self.admin = admin;
        self
    }

    /// Sets [`min_ttl`](Self::min_ttl) and [`ttl_granularity`](Self::ttl_granularity).
    pub fn with_ttl_limits(mut self, min_ttl: Duration, granularity: Duration) -> Self {
        self.min_ttl = min_ttl;
        self.ttl_granularity = granularity;
        self
    }
}
