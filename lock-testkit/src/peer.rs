//! A peer library's own lock as a [`LockBackend`], so that a benchmark runs
//! it through the workload runner next to ours. The peer only takes and
//! gives back; the adapter adds the guard, the waiting the options ask
//! for, and the lost signal a release fires.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{HeldLock, LossNotifier};
use distlock_core::{
    AcquireOptions, Capabilities, Error, FencingToken, LockBackend, LockGuard, LockName,
    LostReason, Result, Wait,
};

/// What a peer library's lock client does.
#[async_trait]
pub trait PeerLock: fmt::Debug + Send + Sync + 'static {
    /// What a grant hands back, and what giving the lock back takes.
    type Grant: Send + Sync + 'static;

    /// Takes `name`, waiting as long as it takes: the fencing token, the
    /// key (or node path) and the grant.
    ///
    /// # Cancel safety
    ///
    /// As the peer library's lock call is.
    async fn lock(&self, name: &LockName) -> Result<(u64, String, Self::Grant)>;

    /// Gives the lock of `grant` back.
    ///
    /// # Cancel safety
    ///
    /// As the peer library's unlock call is.
    async fn unlock(grant: Self::Grant) -> Result<()>;

    /// Leaves the lock of `grant` to expire; by default drops the grant.
    fn abandon(grant: Self::Grant) {
        drop(grant);
    }
}

/// A [`PeerLock`] as a [`LockBackend`].
#[derive(Debug)]
pub struct PeerBackend<P> {
    peer: P,
    capabilities: Capabilities,
    ttl: Duration,
}

impl<P: PeerLock> PeerBackend<P> {
    /// `peer`, promising `capabilities`, with leases of `ttl` (kept alive by
    /// the peer itself).
    pub fn new(peer: P, capabilities: Capabilities, ttl: Duration) -> Self {
        Self {
            peer,
            capabilities,
            ttl,
        }
    }
}

#[async_trait]
impl<P: PeerLock> LockBackend for PeerBackend<P> {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    fn default_ttl(&self) -> Duration {
        self.ttl
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<LockGuard> {
        let (token, key, grant) = within(options.wait, self.peer.lock(name)).await??;
        let notifier = LossNotifier::new();
        let lost = notifier.signal();
        let held = Box::new(PeerHeld::<P> { grant, notifier });
        Ok(distlock_core::raw::session_guard(
            name.clone(),
            FencingToken(token),
            key,
            self.ttl,
            lost,
            held,
            None,
        ))
    }
}

/// Runs `acquiring` within `wait`: [`Wait::Timeout`] ends it with a timeout
/// error; any other wait lets it run to its end (a peer lock has no
/// try-lock to map [`Wait::No`] to).
async fn within<T>(wait: Wait, acquiring: impl Future<Output = T>) -> Result<T> {
    match wait {
        Wait::Timeout(limit) => tokio::time::timeout(limit, acquiring)
            .await
            .map_err(|_| Error::timeout("peer lock wait timed out")),
        _ => Ok(acquiring.await),
    }
}

/// A lock the peer granted.
struct PeerHeld<P: PeerLock> {
    grant: P::Grant,
    notifier: LossNotifier,
}

impl<P: PeerLock> fmt::Debug for PeerHeld<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerHeld")
    }
}

#[async_trait]
impl<P: PeerLock> HeldLock for PeerHeld<P> {
    /// The peer keeps its own lease alive.
    async fn renew(&self) -> Result<()> {
        Ok(())
    }

    async fn release(self: Box<Self>) -> Result<()> {
        self.notifier.fire(LostReason::Released);
        P::unlock(self.grant).await
    }

    fn abandon(self: Box<Self>) {
        P::abandon(self.grant);
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;

    use distlock_core::ErrorKind;

    use super::*;

    #[tokio::test]
    async fn a_timed_wait_ends_a_peer_lock_that_never_comes_with_a_timeout() {
        let waited = within(Wait::Timeout(Duration::from_millis(20)), pending::<()>()).await;
        assert_eq!(waited.map_err(|e| e.kind()), Err(ErrorKind::Timeout));
    }

    #[tokio::test]
    async fn an_untimed_wait_runs_the_peer_lock_to_its_end() {
        for wait in [Wait::No, Wait::Forever] {
            assert_eq!(within(wait, async { 7 }).await.ok(), Some(7), "{wait:?}");
        }
    }
}
