//! Many locks held at once by one client: the cost of holding grows with
//! the count (one lease, renewal or session entry per lock, depending on the
//! backend), and that is what the held-locks sweep measures.
//!
//! This module only takes, keeps and gives back the locks; what is sampled
//! around the hold (process CPU and memory, server request counters) is the
//! caller's, so that it can bracket exactly the phase it wants.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DynLockBackend, LockGuard, LockName, Wait};
use futures::StreamExt;
use tokio::time::Instant;

/// What to hold.
#[derive(Debug, Clone)]
pub struct HoldConfig {
    /// Distinct lock names, all held at once.
    pub locks: usize,
    /// Acquisitions (and releases) in flight at once: enough to hide the
    /// round trip, few enough not to flood the server.
    pub concurrency: usize,
    /// Lease TTL; `None` uses the backend default.
    pub ttl: Option<Duration>,
    /// Prefix of the lock names, so runs do not collide.
    pub name_prefix: String,
    /// How long taking all the locks may take before the point is given up:
    /// a backend that cannot hold this many must not hang the sweep.
    pub acquire_within: Duration,
}

/// Why the locks could not all be taken.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// A lock name could not be formed from the prefix.
    #[error("invalid lock name: {0}")]
    Name(#[source] distlock_core::Error),
    /// An acquisition failed; the locks taken so far were released.
    #[error("acquiring lock {index} of {wanted} failed: {source}")]
    Acquire {
        /// Which name (0-based).
        index: usize,
        /// How many were asked for.
        wanted: usize,
        /// The backend's error.
        #[source]
        source: distlock_core::Error,
    },
    /// Not every lock was taken within [`HoldConfig::acquire_within`]; the
    /// locks taken so far were released.
    #[error("only {acquired} of {wanted} locks were taken within {within:?}")]
    TimedOut {
        /// Locks taken before the bound.
        acquired: usize,
        /// How many were asked for.
        wanted: usize,
        /// The bound.
        within: Duration,
    },
}

/// Locks held by one client, renewed by the backend in the background for
/// as long as this lives.
#[derive(Debug)]
pub struct HeldLocks {
    guards: Vec<LockGuard>,
    concurrency: usize,
    /// How long taking them all took.
    pub acquire_time: Duration,
}

/// The outcome of giving the locks back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Released {
    /// How long it took.
    pub time: Duration,
    /// Releases that failed (a lost lock's release reports that it was lost).
    pub errors: usize,
}

/// Takes `config.locks` distinct names on `client`, `config.concurrency` at
/// a time, within `config.acquire_within`.
pub async fn hold_many(
    client: &Arc<DynLockBackend>,
    config: &HoldConfig,
) -> Result<HeldLocks, HoldError> {
    let names = (0..config.locks)
        .map(|i| LockName::new(format!("{}/{i}", config.name_prefix)))
        .collect::<distlock_core::Result<Vec<_>>>()
        .map_err(HoldError::Name)?;
    let start = Instant::now();
    let deadline = start + config.acquire_within;
    // One bound for the whole batch, below: a stuck acquisition is
    // cancelled with the others when it passes.
    let mut options = AcquireOptions::new().wait(Wait::Forever);
    options.ttl = config.ttl;
    let concurrency = config.concurrency.max(1);
    let mut pending = futures::stream::iter(names.iter().enumerate())
        .map(|(index, name)| {
            let options = options.clone();
            async move { (index, client.acquire(name, &options).await) }
        })
        .buffer_unordered(concurrency);
    let mut guards = Vec::with_capacity(config.locks);
    let failure = loop {
        match tokio::time::timeout_at(deadline, pending.next()).await {
            Ok(Some((_, Ok(guard)))) => guards.push(guard),
            Ok(None) => break None,
            Ok(Some((index, Err(source)))) => {
                break Some(HoldError::Acquire {
                    index,
                    wanted: config.locks,
                    source,
                });
            }
            Err(_) => {
                break Some(HoldError::TimedOut {
                    acquired: guards.len(),
                    wanted: config.locks,
                    within: config.acquire_within,
                });
            }
        }
    };
    // Cancels the acquisitions still in flight (their clean-up runs in the
    // background) before the locks already taken are given back.
    drop(pending);
    let held = HeldLocks {
        guards,
        concurrency,
        acquire_time: start.elapsed(),
    };
    match failure {
        None => Ok(held),
        Some(error) => {
            held.release().await;
            Err(error)
        }
    }
}

impl HeldLocks {
    /// How many are held.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// The lease TTL the backend granted (after its rounding), if any lock
    /// is held: renewals come every third of it.
    pub fn ttl(&self) -> Option<Duration> {
        self.guards.first().map(LockGuard::ttl)
    }

    /// How many are no longer held (lost is final, so counting at the end
    /// of a hold counts every loss during it).
    pub fn lost(&self) -> usize {
        self.guards.iter().filter(|g| !g.is_held()).count()
    }

    /// Releases them all, as many at a time as they were taken.
    pub async fn release(self) -> Released {
        let start = Instant::now();
        let errors = futures::stream::iter(self.guards)
            .map(LockGuard::release)
            .buffer_unordered(self.concurrency)
            .filter(|outcome| std::future::ready(outcome.is_err()))
            .count()
            .await;
        Released {
            time: start.elapsed(),
            errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::memory::MemoryBackend;

    fn config(locks: usize, within: Duration) -> HoldConfig {
        HoldConfig {
            locks,
            concurrency: 4,
            ttl: None,
            name_prefix: "held-test".into(),
            acquire_within: within,
        }
    }

    #[tokio::test]
    async fn holds_every_name_and_gives_them_all_back() {
        let client: Arc<DynLockBackend> = Arc::new(MemoryBackend::new());
        let held = hold_many(&client, &config(10, Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(held.len(), 10);
        assert_eq!(held.lost(), 0);
        let name = LockName::new("held-test/9").unwrap();
        assert!(client.inspect(&name).await.unwrap().holder.is_some());
        let released = held.release().await;
        assert_eq!(released.errors, 0);
        assert!(client.inspect(&name).await.unwrap().holder.is_none());
    }

    #[tokio::test]
    async fn a_name_held_elsewhere_times_out_and_releases_the_rest() {
        let client: Arc<DynLockBackend> = Arc::new(MemoryBackend::new());
        let other = client
            .acquire(
                &LockName::new("held-test/3").unwrap(),
                &AcquireOptions::new(),
            )
            .await
            .unwrap();
        let error = hold_many(&client, &config(5, Duration::from_millis(50)))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                HoldError::TimedOut {
                    acquired: 4,
                    wanted: 5,
                    ..
                }
            ),
            "{error}"
        );
        let first = LockName::new("held-test/0").unwrap();
        assert!(client.inspect(&first).await.unwrap().holder.is_none());
        other.release().await.unwrap();
    }
}
