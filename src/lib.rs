//! distlock: distributed locks, leases and leader election with pluggable backends.
pub use lock_core::*;
