//! How long a lease lives and how long an acquisition may wait.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// How long `acquire` may wait for a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Do not wait: fail with [`ErrorKind::WouldBlock`](crate::ErrorKind::WouldBlock).
    No,
    /// Wait at most this long, then fail with [`ErrorKind::Timeout`](crate::ErrorKind::Timeout).
    Timeout(Duration),
    /// Wait until acquired (or until an error that waiting cannot fix).
    Forever,
}

impl Wait {
    /// The instant at which waiting must stop, counted from `start`; `None` for [`Wait::Forever`].
    pub fn deadline_from(self, start: Instant) -> Option<Instant> {
        match self {
            Wait::No => Some(start),
            Wait::Timeout(d) => Some(start + d),
            Wait::Forever => None,
        }
    }
}

/// Options of one acquisition.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, Wait};
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Wait::Timeout(Duration::from_secs(3)));
/// assert_eq!(opts.ttl, Some(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Lease time-to-live: how long the lock outlives a holder that stops
    /// renewing. `None` takes the backend's configured default.
    pub ttl: Option<Duration>,
    /// How long to wait for a held lock.
    pub wait: Wait,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            ttl: None,
            wait: Wait::Forever,
        }
    }
}

impl AcquireOptions {
    /// Backend default TTL, wait forever.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the lease TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets how long to wait.
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// The TTL to use: ours, or `default`, checked to be non-zero.
    pub fn effective_ttl(&self, default: Duration) -> Result<Duration> {
        let ttl = self.ttl.unwrap_or(default);
        check_ttl(ttl)?;
        Ok(ttl)
    }
}

/// Rejects a zero TTL: a lease that expires at once cannot protect anything.
pub fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(Error::invalid_config(
            "TTL must be greater than zero; a lease that expires at once cannot hold a lock",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn zero_ttl_is_invalid_config() {
        let err = AcquireOptions::new()
            .ttl(Duration::ZERO)
            .effective_ttl(Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn default_ttl_applies_when_unset() {
        let ttl = AcquireOptions::new().effective_ttl(Duration::from_secs(7));
        assert_eq!(ttl.unwrap(), Duration::from_secs(7));
    }
}
