//! Counting hand-offs in a contention benchmark: an acquisition by a
//! different client than the previous holder is a real hand-off; a client
//! that releases and takes the lock straight back is only an acquisition.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireOptions, Capabilities, DynLockBackend, LockBackend, LockGuard, LockName, Result,
};
use distlock_workload::ClientFactory;
use futures::FutureExt;

/// The hand-offs between the clients of one run, counted inside the
/// critical section so that the count is exact.
#[derive(Debug, Clone)]
pub struct Handoffs {
    holder: Arc<AtomicU64>,
    changes: Arc<AtomicU64>,
}

impl Default for Handoffs {
    fn default() -> Self {
        Self {
            holder: Arc::new(AtomicU64::new(u64::MAX)),
            changes: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Handoffs {
    /// A counter with no holder yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Client `id`'s backend, counting its acquisitions into this counter.
    pub fn count(&self, inner: Arc<DynLockBackend>, id: u64) -> Arc<DynLockBackend> {
        Arc::new(HandoffCounter {
            inner,
            id,
            handoffs: self.clone(),
        })
    }

    /// `factory`'s clients, each counting into this counter under an id of
    /// its own.
    pub fn counting(&self, factory: ClientFactory) -> ClientFactory {
        let handoffs = self.clone();
        let next_id = Arc::new(AtomicU64::new(0));
        Arc::new(move || {
            let (handoffs, connecting) = (handoffs.clone(), factory());
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            async move { Ok(handoffs.count(connecting.await?, id)) }.boxed()
        })
    }

    /// The hand-offs counted so far.
    pub fn total(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// One client's backend, noting each acquisition's holder in [`Handoffs`].
#[derive(Debug)]
struct HandoffCounter {
    inner: Arc<DynLockBackend>,
    id: u64,
    handoffs: Handoffs,
}

#[async_trait]
impl LockBackend for HandoffCounter {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn default_ttl(&self) -> Duration {
        self.inner.default_ttl()
    }

    /// # Cancel safety
    /// As the inner backend's `acquire`: the count happens only once the
    /// guard is returned.
    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<LockGuard> {
        let guard = self.inner.acquire(name, options).await?;
        if self.handoffs.holder.swap(self.id, Ordering::SeqCst) != self.id {
            self.handoffs.changes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(guard)
    }
}
