//! The distlock contract.
//!
//! `distlock-core` defines what every distlock backend promises: validated
//! [`LockName`]s, leases with a TTL, strictly increasing [`FencingToken`]s, a
//! [`LostSignal`] that fires when a held lock is gone, one [`Error`] type with
//! a precise [`ErrorKind`], declared [`Capabilities`], semaphores and
//! read-write locks ([`LockBackend::acquire_as`] with an [`Access`], one
//! grant rule for all three), and leader election
//! ([`ElectionBackend`], with string-named forms in [`ElectionBackendExt`]
//! as [`LockBackendExt`] has for locks). It depends on no network client.
//! Backends live in `distlock-etcd`, `distlock-redis`, `distlock-zk`,
//! `distlock-postgres` and `distlock-file`; [`memory::MemoryBackend`] is a
//! faithful in-process reference. Applications use them through the
//! [`distlock`](https://docs.rs/distlock) facade, which re-exports this
//! crate's API.
//!
//! It also owns the lease lifecycle that backends share ([`raw`]): a
//! backend supplies its round trips (renew, release, proclaim) and what it
//! was granted, and distlock-core keeps the validity deadline (on
//! [`raw::BootClock`], which counts through suspend), renews every TTL/3
//! (sooner when a grant arrives late in its TTL), fires the lost signal, and
//! refuses a grant whose lease has already run out.
//!
//! ```
//! # mod distlock { pub use distlock_core::*; } // the facade's paths
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
//! use distlock::{LockBackendExt, memory::MemoryBackend};
//!
//! let backend = MemoryBackend::new();
//! let guard = backend.lock("reports/nightly").await?;
//! println!("holding {} with token {}", guard.name(), guard.token());
//! assert_eq!(backend.try_lock("reports/nightly").await.unwrap_err().kind(),
//!            distlock::ErrorKind::WouldBlock);
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod access;
mod admin;
mod backend;
mod background;
mod capabilities;
mod client_config;
mod clock;
mod duration;
mod election;
mod election_ext;
mod error;
mod fencing;
mod flag;
mod guard;
mod guarded;
mod health;
mod leader_filter;
mod leader_observer;
mod lease;
mod lost;
pub mod memory;
mod multi;
mod name;
mod options;
pub mod raw;
mod renewer;
mod settings;
mod site;
mod space;
pub mod telemetry;
mod tls_files;
mod url_parts;
mod validity;

pub use access::{Access, Permits};
pub use admin::{
    AdminCapabilities, DEFAULT_LIST_LIMIT, HolderInfo, ListOptions, ListPage, ListedLock,
    LockStatus, Primitive, WaiterInfo, default_holder_description,
};
pub use backend::{AcquireRequest, DynLockBackend, LockBackend, LockBackendExt};
pub use background::wait_for_background;
pub use capabilities::{Capabilities, FencingStrength};
pub use client_config::ClientConfig;
pub use election::{
    Candidacy, DynElectionBackend, ElectionBackend, LeaderInfo, LeaderStream, Leadership,
};
pub use election_ext::{ElectionBackendExt, Leaders};
pub use error::{BoxError, Error, ErrorKind, ErrorSite, Result};
pub use fencing::{FencingToken, TokenRangeError};
pub use guard::{Held, LockGuard};
pub use guarded::GuardedWrites;
pub use health::LockHealth;
pub use lost::{LostReason, LostSignal};
pub use multi::MultiLockGuard;
pub use name::{LockName, MAX_NAME_LEN};
pub use options::{AcquireOptions, MIN_TTL, Wait, check_ttl};
