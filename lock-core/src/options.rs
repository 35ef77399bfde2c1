//! How long a lease lives and how long an acquisition may wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::validity::drift_allowance;

/// The shortest TTL any backend accepts. Below it the clock-drift allowance
/// (1 % + 2 ms) eats most of the lease, and a guard would be lost before its
/// holder could use it.
pub const MIN_TTL: Duration = Duration::from_millis(10);

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
/// use distlock_core::{AcquireOptions, Wait};
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Wait::Timeout(Duration::from_secs(3)));
/// assert_eq!(opts.ttl, Some(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Lease time-to-live: how long the lock outlives a holder that stops
    /// renewing. `None` takes the backend's configured default.
    pub ttl: Option<Duration>,
    /// How long to wait for a held lock.
    pub wait: Wait,
    /// Who is acquiring, as operators will see it in
    /// [`inspect`](crate::LockBackend::inspect). `None` takes the backend's
    /// configured `holder`, else `host:pid`.
    pub holder: Option<Arc<str>>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            ttl: None,
            wait: Wait::Forever,
            holder: None,
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

    /// Sets the holder description stored with the grant.
    pub fn holder(mut self, holder: impl Into<Arc<str>>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// The description to store with the grant: ours, else `configured`,
    /// else `host:pid`.
    pub fn holder_description(&self, configured: Option<&str>) -> String {
        crate::admin::holder_description(self.holder.as_deref(), configured)
    }

    /// The TTL to use: ours, or `default`, checked by [`check_ttl`].
    pub fn effective_ttl(&self, default: Duration) -> Result<Duration> {
        let ttl = self.ttl.unwrap_or(default);
        check_ttl(ttl)?;
        Ok(ttl)
    }

    /// The TTL to use on a backend with `caps`: ours, or `default`, checked
    /// against the backend's minimum and rounded up to its granularity.
    pub fn ttl_for(&self, default: Duration, caps: &Capabilities) -> Result<Duration> {
        ttl_for(self.ttl.unwrap_or(default), caps)
    }
}

/// Rejects a TTL of zero or below [`MIN_TTL`]: such a lease would be lost
/// before its holder could use it.
pub fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(Error::invalid_config(
            "TTL must be greater than zero; a lease that expires at once cannot hold a lock",
        ));
    }
    if ttl < MIN_TTL {
        return Err(Error::invalid_config(format!(
            "TTL {ttl:?} is below the minimum of {MIN_TTL:?}: the clock-drift allowance of \
             {:?} would leave the holder almost no time",
            drift_allowance(ttl)
        )));
    }
    Ok(())
}

/// Checks `ttl` against a backend's minimum and rounds it up to the
/// backend's granularity (etcd leases are whole seconds).
pub fn ttl_for(ttl: Duration, caps: &Capabilities) -> Result<Duration> {
    check_ttl(ttl)?;
    if ttl < caps.min_ttl {
        return Err(Error::invalid_config(format!(
            "TTL {ttl:?} is below the minimum of {:?} on the {} backend",
            caps.min_ttl, caps.backend
        )));
    }
    Ok(round_up(ttl, caps.ttl_granularity))
}

fn round_up(ttl: Duration, granularity: Duration) -> Duration {
    let step = granularity.as_nanos().max(1);
    let steps = ttl.as_nanos().div_ceil(step);
    Duration::from_nanos(u64::try_from(steps * step).unwrap_or(u64::MAX))
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
    fn ttl_below_the_drift_floor_is_invalid_config_naming_the_minimum() {
        let err = check_ttl(Duration::from_millis(2)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("10ms"), "{err}");
    }

    #[test]
    fn ttl_below_a_backend_minimum_names_backend_and_minimum() {
        let caps = Capabilities::new("etcd", crate::FencingStrength::Strong)
            .with_ttl_limits(Duration::from_secs(1), Duration::from_secs(1));
        let err = ttl_for(Duration::from_millis(500), &caps).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.message().contains("1s") && err.message().contains("etcd"),
            "{err}"
        );
        let rounded = ttl_for(Duration::from_millis(1500), &caps).unwrap();
        assert_eq!(rounded, Duration::from_secs(2));
    }

    #[test]
    fn default_ttl_applies_when_unset() {
        let ttl = AcquireOptions::new().effective_ttl(Duration::from_secs(7));
        assert_eq!(ttl.unwrap(), Duration::from_secs(7));
    }
}
