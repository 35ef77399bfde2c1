#![doc = include_str!("docs.md")]

// The README's Rust examples compile as doctests (with the features the
// workspace's tests use), so the front page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

mod backends;
mod config;
mod connect;
mod duration;
pub mod fence;
mod guarded;
pub mod prelude;
mod redact;
mod scheme;
#[cfg(feature = "testing")]
pub mod testing;

pub use config::{Config, URL_ENV, default_url, env_vars};
pub use connect::{Backend, connect, connect_with};
pub use distlock_core::raw::{SETTINGS, SettingScope, SettingSpec, Settings};
pub use duration::{format_duration, human_duration, parse_duration};
pub use guarded::Owner;
// What users of locks and elections need. What backend authors need lives
// in `distlock_core::raw`, and is not re-exported here.
pub use distlock_core::memory;
pub use distlock_core::telemetry;
pub use distlock_core::{
    Access, AcquireOptions, Candidacy, Capabilities, DynElectionBackend, DynLockBackend,
    ElectionBackend, ElectionBackendExt, Error, ErrorKind, FencingStrength, FencingToken, Held,
    LeaderInfo, LeaderStream, Leaders, Leadership, LockBackend, LockBackendExt, LockGuard,
    LockHealth, LockName, LostReason, LostSignal, MAX_NAME_LEN, MIN_TTL, MultiLockGuard, Permits,
    Result, TokenRangeError, Wait, check_ttl, wait_for_background,
};
pub use distlock_core::{
    AdminCapabilities, DEFAULT_LIST_LIMIT, HolderInfo, ListOptions, ListPage, ListedLock,
    LockStatus, Primitive, WaiterInfo, default_holder_description,
};
pub use redact::redact_url;
pub use scheme::Scheme;

/// The file backend: lock files for the processes of one machine.
pub mod file {
    pub use distlock_file::*;
}

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use distlock_etcd::*;
}

/// The Redis, Redis Cluster and Redlock backends (feature `redis`).
#[cfg(feature = "redis")]
pub mod redis {
    pub use distlock_redis::*;
}

/// The MySQL/MariaDB backend (feature `mysql`).
#[cfg(feature = "mysql")]
pub mod mysql {
    pub use distlock_mysql::*;
}

/// The PostgreSQL backend (feature `postgres`).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use distlock_postgres::*;
}

/// The ZooKeeper backend (feature `zk`).
#[cfg(feature = "zk")]
pub mod zk {
    pub use distlock_zk::*;
}
