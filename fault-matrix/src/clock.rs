//! One clock for every process of a run: `CLOCK_MONOTONIC` is shared by all
//! processes of the machine, so a client's timestamps and the runner's fault
//! times compare directly.

use nix::time::{ClockId, clock_gettime};

/// Nanoseconds on the machine's monotonic clock.
pub fn now_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec()).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

/// Milliseconds between two [`now_ns`] readings, negative when `to` is
/// earlier than `from`.
pub fn ms_between(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}
