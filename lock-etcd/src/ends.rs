//! Tracing events for every key and lease this client ends itself.
//!
//! etcd shows a deleted key the same way whoever deleted it: a release, a
//! revocation the client asked for, or a lease that expired. A process
//! that must tell them apart (the fault matrix, judging whether a lease
//! ended by the server's own doing) subscribes to the target [`TARGET`]:
//! every release that may have deleted a key, and every revocation that
//! may have ended a lease, is one event there, with the revision at which
//! it took effect, or `-1` when the outcome is not known (an answer lost,
//! a retry). A revocation that found the lease already gone is not one.

/// The tracing target of these events (level `debug`).
pub const TARGET: &str = "distlock_etcd::ends";

/// The revision of an end that is not known.
pub(crate) const UNKNOWN: i64 = -1;

/// Our release may have deleted `key`, at `revision` (or [`UNKNOWN`]).
pub(crate) fn key_deleted(key: &str, revision: i64) {
    tracing::debug!(target: TARGET, key, revision, "key deleted");
}

/// Our revocation may have ended lease `lease`, at `revision` (or
/// [`UNKNOWN`]).
pub(crate) fn lease_revoked(lease: i64, revision: i64) {
    tracing::debug!(target: TARGET, lease, revision, "lease revoked");
}
