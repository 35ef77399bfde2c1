//! The lock backend trait, written for implementors, and its convenience extension.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::name::LockName;
use crate::options::{AcquireOptions, Wait};

/// A distributed lock service: etcd, Redis, ZooKeeper, a file, or memory.
///
/// The trait is object safe; the backend is usually chosen at run time and
/// held as `Arc<DynLockBackend>`. It has one required async method; the
/// convenience forms live in [`LockBackendExt`].
///
/// # Contract
///
/// - At most one [`LockGuard`] for a name is held at any time, across all
///   clients of the same service, while their leases are valid.
/// - Every successful acquisition returns a [`FencingToken`](crate::FencingToken)
///   greater than every earlier one for the same name (see its contract).
/// - Names are validated before any I/O (they arrive as [`LockName`]).
/// - A zero TTL is rejected with `InvalidConfig`.
/// - Every network call has a timeout: no method hangs past its wait plus the
///   backend's request timeout.
#[async_trait]
pub trait LockBackend: fmt::Debug + Send + Sync + 'static {
    /// What this backend promises.
    fn capabilities(&self) -> Capabilities;

    /// The default lease TTL used when [`AcquireOptions::ttl`] is `None`.
    fn default_ttl(&self) -> Duration;

    /// Acquires `name`, waiting as `options.wait` allows.
    ///
    /// Fails with `WouldBlock` ([`Wait::No`]) or `Timeout` ([`Wait::Timeout`])
    /// when the lock stays held by someone else.
    ///
    /// # Cancel safety
    ///
    /// Cancelling (dropping) the future gives up the attempt and its place in
    /// the queue. Any entry it left on the server is deleted in the background
    /// and in any case expires with its lease, so it never blocks other
    /// contenders beyond the TTL.
    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<LockGuard>;
}

/// A lock backend chosen at run time.
pub type DynLockBackend = dyn LockBackend;

/// Convenience methods for every [`LockBackend`], taking names as strings.
#[async_trait]
pub trait LockBackendExt: LockBackend {
    /// Acquires `name` if it is free right now, else fails with `WouldBlock`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`].
    async fn try_lock(&self, name: &str) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        let options = AcquireOptions::new().wait(Wait::No);
        self.acquire(&name, &options).await
    }

    /// Acquires `name`, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`]: cancelling loses the place in the queue.
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        self.acquire(&name, &AcquireOptions::new()).await
    }

    /// Acquires `name`, waiting at most `wait`, else fails with `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`]: cancelling loses the place in the queue.
    async fn lock_timeout(&self, name: &str, wait: Duration) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        let options = AcquireOptions::new().wait(Wait::Timeout(wait));
        self.acquire(&name, &options).await
    }
}

impl<T: LockBackend + ?Sized> LockBackendExt for T {}
