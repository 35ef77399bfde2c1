//! Test kit for distlock backends: the conformance suite, real-server
//! launchers, a fault proxy, shared assertions, a contention workload
//! runner and the hand-off floor its rates are set against, histories of
//! lock operations with a linearizability checker, and a harness that sets
//! a backend's uncontended cycle against the raw round trips of the same
//! requests.
//!
//! Backend crates run the whole conformance suite with one macro call and
//! start real etcd, Redis and ZooKeeper servers as child processes on loopback
//! ports, with temporary data directories.

pub mod assert;
pub mod conformance;
pub mod fixtures;
pub mod floor;
pub mod handoffs;
pub mod history;
pub mod lock_peer;
pub mod overhead;
pub mod peer;
pub mod proxy;
pub mod servers;

/// The contention workload runner (the `distlock-workload` crate).
pub use distlock_workload as workload;
