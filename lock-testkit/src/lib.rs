//! Test kit for distlock backends: the conformance suite, real-server
//! launchers, a fault proxy, shared assertions, and a contention workload
//! runner.
//!
//! Backend crates run the whole conformance suite with one macro call and
//! start real etcd, Redis and ZooKeeper servers as child processes on loopback
//! ports, with temporary data directories.

pub mod assert;
pub mod conformance;
#[cfg(feature = "fault-matrix")]
pub mod fault_matrix;
pub mod peer;
pub mod proxy;
pub mod servers;

/// The contention workload runner (the `lock-workload` crate).
pub use lock_workload as workload;
