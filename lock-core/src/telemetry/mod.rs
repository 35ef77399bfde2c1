//! Metrics and tracing for every backend, emitted from this one place.
//!
//! Backends wrap their acquisitions in `distlock_core::raw::observe_acquire`; distlock-core's
//! guard and renewal schedule record the rest (holds, losses, renewals,
//! releases). So the names, labels and spans below are the same on every
//! backend, and a backend cannot forget one.
//!
//! Metrics go through the [`metrics`] facade: install the exporter you
//! already run (Prometheus, OpenTelemetry, ...) and they appear; with no
//! recorder installed they cost next to nothing.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `distlock_acquisitions_total` | counter | `backend`, `result` | acquire attempts by result: `acquired`, `would_block`, `timeout`, `error`, `cancelled` |
//! | `distlock_acquire_wait_seconds` | histogram | `backend`, `result` | time from the call to its result |
//! | `distlock_waiting` | gauge | `backend` | acquisitions in progress |
//! | `distlock_held` | gauge | `backend` | locks held by this process |
//! | `distlock_hold_seconds` | histogram | `backend` | from grant to release or loss |
//! | `distlock_losses_total` | counter | `backend`, `reason` | locks lost, by [`LostReason`] label |
//! | `distlock_renewals_total` | counter | `backend`, `result` | lease renewals: `ok`, `lost`, `error` |
//! | `distlock_renewal_seconds` | histogram | `backend` | renewal round trips |
//! | `distlock_renewal_failing_total` | counter | `backend` | held locks whose renewals started failing while validity was left (each spell ends in recovery or loss) |
//!
//! Spans, all with the fields `backend`, `lock`, `token` and `outcome`:
//! `distlock.acquire`, `distlock.renew` and `distlock.release`.
//!
//! Backends whose leases are sessions (ZooKeeper) renew the session, not
//! each lock, so they record no per-lock renewals.

use crate::lost::LostReason;

// The recording itself is for backends and distlock-core: `distlock_core::raw`
// re-exports what a backend calls.
pub(crate) mod record;
pub(crate) use record::{
    HoldMetrics, count_renewal_failing, current_backend, observe_release, observe_renewal,
};

/// Acquire attempts by backend and result.
pub const ACQUISITIONS: &str = "distlock_acquisitions_total";
/// Time from an acquire call to its result.
pub const ACQUIRE_WAIT: &str = "distlock_acquire_wait_seconds";
/// Acquisitions in progress.
pub const WAITING: &str = "distlock_waiting";
/// Locks held by this process.
pub const HELD: &str = "distlock_held";
/// From grant to release or loss.
pub const HOLD_TIME: &str = "distlock_hold_seconds";
/// Locks lost, by reason.
pub const LOSSES: &str = "distlock_losses_total";
/// Lease renewals by result.
pub const RENEWALS: &str = "distlock_renewals_total";
/// Renewal round trips.
pub const RENEWAL_TIME: &str = "distlock_renewal_seconds";
/// Spells of failing renewal that began while validity was left.
pub const RENEWAL_FAILING: &str = "distlock_renewal_failing_total";

/// The `reason` label of a [`LostReason`].
pub fn reason_label(reason: &LostReason) -> &'static str {
    match reason {
        LostReason::Released => "released",
        LostReason::Expired => "expired",
        LostReason::RenewalFailed(_) => "renewal_failed",
        LostReason::Deleted => "deleted",
        LostReason::Disconnected => "disconnected",
        LostReason::DeadlineMissed => "deadline_missed",
        LostReason::Revoked => "revoked",
    }
}
