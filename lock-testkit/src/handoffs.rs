//! Counting hand-offs in a contention benchmark: an acquisition by a
//! different client than the previous holder is a real hand-off; a client
//! that releases and takes the lock straight back is only an acquisition.
//!
//! The workload counts only grants before the end of its run, and the
//! waiters still queued then take the lock once each as the run winds down:
//! counted too, they would add up to one hand-off per client to every run.
//! [`Handoffs::counting`] therefore stops counting where the workload's
//! clock stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireOptions, Capabilities, DynLockBackend, LockBackend, LockGuard, LockName, Result,
};
use distlock_workload::ClientFactory;
use futures::FutureExt;
use tokio::time::Instant;

/// The hand-offs between the clients of one run, counted inside the
/// critical section so that the count is exact.
#[derive(Debug, Clone)]
pub struct Handoffs {
    holder: Arc<AtomicU64>,
    changes: Arc<AtomicU64>,
    /// Grants after this are not counted; `None` counts every grant.
    until: Arc<Mutex<Option<Instant>>>,
}

impl Default for Handoffs {
    fn default() -> Self {
        Self {
            holder: Arc::new(AtomicU64::new(u64::MAX)),
            changes: Arc::new(AtomicU64::new(0)),
            until: Arc::new(Mutex::new(None)),
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

    /// `factory`'s clients for a workload run of `duration`, each counting
    /// into this counter under an id of its own, until `duration` after the
    /// last of them connected (the workload starts its clock once all
    /// have), so that the count covers the run the workload reports.
    pub fn counting(&self, factory: ClientFactory, duration: Duration) -> ClientFactory {
        let handoffs = self.clone();
        let next_id = Arc::new(AtomicU64::new(0));
        Arc::new(move || {
            let (handoffs, connecting) = (handoffs.clone(), factory());
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            async move {
                let client = connecting.await?;
                *lock(&handoffs.until) = Some(Instant::now() + duration);
                Ok(handoffs.count(client, id))
            }
            .boxed()
        })
    }

    /// Whether a grant now falls in the counted run.
    fn counts_now(&self) -> bool {
        lock(&self.until).is_none_or(|until| Instant::now() <= until)
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
        if self.handoffs.counts_now()
            && self.handoffs.holder.swap(self.id, Ordering::SeqCst) != self.id
        {
            self.handoffs.changes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(guard)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use distlock_core::LockBackendExt;
    use distlock_core::memory::MemoryBackend;
    use distlock_workload::client_factory;

    use super::*;

    async fn two_clients(handoffs: &Handoffs) -> (Arc<DynLockBackend>, Arc<DynLockBackend>) {
        let memory = MemoryBackend::new();
        let factory = client_factory(move || {
            let memory = memory.clone();
            async move { Ok(memory) }
        });
        let counted = handoffs.counting(factory, Duration::from_secs(3600));
        (counted().await.unwrap(), counted().await.unwrap())
    }

    #[tokio::test]
    async fn a_grant_to_another_client_is_a_hand_off_and_taking_it_back_is_not() {
        let handoffs = Handoffs::new();
        let (a, b) = two_clients(&handoffs).await;
        for client in [&a, &a, &b] {
            client
                .try_lock("job")
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }
        // The first grant, then a to b; a taking it back is no hand-off.
        assert_eq!(handoffs.total(), 2);
    }

    #[tokio::test]
    async fn grants_after_the_counted_run_are_not_counted() {
        let handoffs = Handoffs::new();
        let (a, b) = two_clients(&handoffs).await;
        a.try_lock("job").await.unwrap().release().await.unwrap();
        *lock(&handoffs.until) = Some(Instant::now());
        tokio::time::sleep(Duration::from_millis(1)).await;
        b.try_lock("job").await.unwrap().release().await.unwrap();
        assert_eq!(handoffs.total(), 1);
    }
}
