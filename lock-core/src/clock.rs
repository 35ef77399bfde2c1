//! The clock that lease validity is measured on.
//!
//! A server keeps expiring leases while this machine is suspended or its VM
//! is paused, so validity must be measured on a clock that keeps counting
//! through both. `CLOCK_MONOTONIC` (and so `std::time::Instant` and Tokio's
//! clock) stops during suspend on Linux; `CLOCK_BOOTTIME` does not.
//! [`BootClock`] reads `CLOCK_BOOTTIME` where the platform has it and the
//! monotonic clock elsewhere.
//!
//! Timers still sleep on Tokio's clock. After a resume, a deadline measured
//! here has already passed, so [`LockGuard::is_held`](crate::LockGuard::is_held)
//! turns false at once, before any timer fires.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A clock for lease deadlines: time elapsed since a fixed, arbitrary origin.
pub trait LeaseClock: fmt::Debug + Send + Sync + 'static {
    /// Time since this clock's origin. Never goes backwards.
    fn now(&self) -> Duration;
}

/// `CLOCK_BOOTTIME` on Linux and Android (counts through suspend), the
/// monotonic clock elsewhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct BootClock;

impl LeaseClock for BootClock {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn now(&self) -> Duration {
        use rustix::time::{ClockId, clock_gettime};
        let ts = clock_gettime(ClockId::Boottime);
        Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        )
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn now(&self) -> Duration {
        monotonic_since_start()
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn monotonic_since_start() -> Duration {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// The process-wide [`BootClock`], shared by every lease that does not ask
/// for another clock.
pub fn boot_clock() -> Arc<dyn LeaseClock> {
    static CLOCK: OnceLock<Arc<dyn LeaseClock>> = OnceLock::new();
    CLOCK.get_or_init(|| Arc::new(BootClock)).clone()
}

/// Tokio's clock, which a test can pause and advance. The in-memory backend
/// keeps its leases on it, so its own validity must use it too.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaseClock for TokioClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to: for tests of what happens when time
/// jumps (a suspend, a paused VM) while timers do not fire.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at its origin.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl LeaseClock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// When a request was sent, on a lease clock: validity counts from here.
#[derive(Debug, Clone)]
pub struct SentAt {
    clock: Arc<dyn LeaseClock>,
    at: Duration,
}

impl SentAt {
    /// Now, on the [`BootClock`]. Take it just before sending the request
    /// that grants or renews a lease.
    pub fn now() -> Self {
        Self::now_on(boot_clock())
    }

    /// Now, on `clock`.
    pub fn now_on(clock: Arc<dyn LeaseClock>) -> Self {
        let at = clock.now();
        SentAt { clock, at }
    }

    /// The instant `sent` of Tokio's clock as a reading of `clock`, which
    /// must count as Tokio's clock does ([`TokioClock`]): exact there, and
    /// wrong on any clock that counts through suspend, which Tokio's does
    /// not. Everywhere else, stamp the request with [`SentAt::now`] when it
    /// is sent.
    pub(crate) fn from_tokio_instant(
        clock: Arc<dyn LeaseClock>,
        sent: tokio::time::Instant,
    ) -> Self {
        let at = clock.now().saturating_sub(sent.elapsed());
        SentAt { clock, at }
    }

    /// The clock this stamp was read from.
    pub fn clock(&self) -> &Arc<dyn LeaseClock> {
        &self.clock
    }

    /// The reading.
    pub fn at(&self) -> Duration {
        self.at
    }

    /// How long ago this was, on its clock.
    pub fn elapsed(&self) -> Duration {
        self.clock.now().saturating_sub(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward() {
        let a = BootClock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(BootClock.now() > a);
    }

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let before = clock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(clock.now(), before);
        clock.advance(Duration::from_secs(3));
        assert_eq!(clock.now(), before + Duration::from_secs(3));
    }
}
