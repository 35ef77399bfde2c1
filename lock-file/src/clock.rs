//! The clocks that lease deadlines on disk are kept on.
//!
//! Every process on one machine, in one boot, shares `CLOCK_BOOTTIME`: it
//! never steps, so a lease deadline on it is neither lengthened by a
//! wall-clock step backward nor cut short by a step forward. A record also
//! carries a wall-clock deadline, used only when the boot clock cannot be
//! compared: the record was written in another boot (or another time
//! namespace), or the boot clock is unknown on this platform.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::raw::{BootClock, LeaseClock as _};

/// Both clocks, read once per decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    /// Milliseconds since the Unix epoch (0 if the clock is before 1970).
    pub(crate) wall_ms: u64,
    /// This boot's id and `CLOCK_BOOTTIME` in milliseconds, where known.
    pub(crate) boot: Option<BootNow>,
}

/// A reading of the boot clock, with the boot (and time namespace) it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BootNow {
    pub(crate) id: &'static str,
    pub(crate) ms: u64,
}

/// Both clocks now.
pub(crate) fn now() -> Now {
    Now {
        wall_ms: millis(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        ),
        boot: boot_id().map(|id| BootNow {
            id,
            ms: millis(BootClock.now()),
        }),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Names this boot and this process's time namespace (which may offset
/// `CLOCK_BOOTTIME`): two readings compare only if their ids are equal.
fn boot_id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        if !cfg!(any(target_os = "linux", target_os = "android")) {
            return None;
        }
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let boot = boot.trim();
        if boot.is_empty() {
            return None;
        }
        // Kernels without time namespaces have no such link, and one namespace.
        let ns = std::fs::read_link("/proc/self/ns/time")
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(format!("{boot} {ns}"))
    })
    .as_deref()
}

/// `ms` on both clocks of one boot: the instants unit tests decide at.
#[cfg(test)]
pub(crate) fn test_at(ms: u64) -> Now {
    Now {
        wall_ms: ms,
        boot: Some(BootNow { id: "boot", ms }),
    }
}

/// A TTL in whole milliseconds, rounded up and at least 1.
pub(crate) use distlock_core::raw::lease_millis as ttl_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn linux_has_a_boot_clock_that_names_its_boot() {
        let a = now().boot.expect("a boot clock on Linux");
        let b = now().boot.unwrap();
        assert_eq!(a.id, b.id);
        assert!(b.ms >= a.ms);
    }
}
