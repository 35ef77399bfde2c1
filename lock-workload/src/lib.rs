//! The contention workload runner shared by the backend benchmarks and
//! `distlock bench`. (`distlock-testkit` re-exports it as `distlock_testkit::workload`.)
//!
//! N clients (each its own backend instance, as separate processes would be)
//! take M lock names in turn for a fixed duration. Every critical section
//! checks mutual exclusion and token order, so a benchmark that goes fast by
//! being wrong shows up as violations. The clients contend on a mutex, a
//! semaphore or a read-write lock ([`Primitive`]).
//!
//! For the scale benchmark, [`hold_many`] has one client hold many locks at
//! once, and [`ProcessSample`] reads what that costs this process.

mod held;
mod primitive;
mod process;

pub use held::{HeldLocks, HoldConfig, HoldError, Released, hold_many};
pub use primitive::Primitive;
pub use process::{MachineSample, ProcessError, ProcessSample};

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DynLockBackend, ErrorKind, LockBackend, LockName, Result, Wait,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

/// Makes one new client of the backend under test.
pub type ClientFactory =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<DynLockBackend>>> + Send + Sync>;

/// A [`ClientFactory`] that makes each client with `connect`.
pub fn client_factory<B, F>(connect: impl Fn() -> F + Send + Sync + 'static) -> ClientFactory
where
    B: LockBackend,
    F: Future<Output = Result<B>> + Send + 'static,
{
    Arc::new(move || {
        let connecting = connect();
        async move { Ok(Arc::new(connecting.await?) as Arc<DynLockBackend>) }.boxed()
    })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Concurrent clients, each with its own backend instance.
    pub clients: usize,
    /// Lock names shared by the clients; client `i` starts on name `i % locks`
    /// and moves to the next name after each acquisition.
    pub locks: usize,
    /// How long to run.
    pub duration: Duration,
    /// Lease TTL; `None` uses the backend default.
    pub ttl: Option<Duration>,
    /// Time spent inside each critical section.
    pub hold: Duration,
    /// Prefix of the lock names, so runs do not collide.
    pub name_prefix: String,
    /// What the clients contend on.
    pub primitive: Primitive,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            clients: 8,
            locks: 1,
            duration: Duration::from_secs(5),
            ttl: None,
            hold: Duration::ZERO,
            name_prefix: "bench".into(),
            primitive: Primitive::Lock,
        }
    }
}

/// Wait-latency percentiles, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencySummary {
    /// Median wait.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Longest wait.
    pub max_us: u64,
    /// Mean wait.
    pub mean_us: f64,
}

/// The outcome of a workload run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkloadReport {
    /// Acquisitions completed within the run.
    pub acquisitions: u64,
    /// Acquisitions per second.
    pub per_second: f64,
    /// Time from asking for the lock to holding it.
    pub wait: LatencySummary,
    /// Acquisitions per client, in client order (fairness).
    pub per_client: Vec<u64>,
    /// The fewest acquisitions of any client divided by the most (1.0 is perfectly even).
    pub fairness: f64,
    /// Times a grant found someone inside who must not have been (two
    /// holders of a lock, a permit beyond the limit, a writer beside anyone).
    /// Must be 0.
    pub violations: u64,
    /// Times an exclusive grant's token (a lock's, a writer's) was not above
    /// every earlier grant's of its name. Must be 0 (except for best-effort
    /// backends after data loss).
    pub token_regressions: u64,
    /// For a lock: time from a release to the grant of a client that was
    /// already waiting when it happened (one hand-off of the lock).
    pub handoff: LatencySummary,
    /// Hand-offs that took longer than [`SLOW_HANDOFF`].
    pub slow_handoffs: u64,
    /// How long each release took (its round trips): the part of a
    /// hand-off spent before the server can let the next client in.
    pub release: LatencySummary,
    /// Acquisitions or releases that failed with an error.
    pub errors: u64,
    /// The first error seen, if any.
    pub first_error: Option<String>,
}

/// Shared progress of a run, for progress bars.
#[derive(Debug, Default)]
pub struct Progress {
    /// Acquisitions completed so far.
    pub acquisitions: AtomicU64,
}

/// A hand-off slower than this is counted in
/// [`WorkloadReport::slow_handoffs`]: it took a path other than a release
/// waking the next waiter (a polling loop, a late watch).
pub const SLOW_HANDOFF: Duration = Duration::from_millis(50);

struct Shared {
    names: Vec<LockName>,
    checks: Vec<primitive::Occupancy>,
    /// When each lock was last released.
    released: Vec<std::sync::Mutex<Option<Instant>>>,
    violations: AtomicU64,
    regressions: AtomicU64,
    errors: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
    progress: Arc<Progress>,
}

impl Shared {
    fn record_error(&self, error: &distlock_core::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| error.to_string());
    }
}

/// Runs the workload and reports what it measured.
///
/// Clients are created before the clock starts. Each acquisition waits at
/// most until the end of the run plus 5 s, so a stuck backend cannot hang it.
pub async fn run_workload(
    config: &WorkloadConfig,
    factory: ClientFactory,
    progress: Arc<Progress>,
) -> Result<WorkloadReport> {
    let locks = config.locks.max(1);
    let names = (0..locks)
        .map(|i| LockName::new(format!("{}/{i}", config.name_prefix)))
        .collect::<Result<Vec<_>>>()?;
    let shared = Arc::new(Shared {
        names,
        checks: (0..locks).map(|_| Default::default()).collect(),
        released: (0..locks).map(|_| Default::default()).collect(),
        violations: AtomicU64::new(0),
        regressions: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_error: std::sync::Mutex::new(None),
        progress,
    });
    let mut clients = Vec::with_capacity(config.clients);
    for _ in 0..config.clients {
        clients.push(factory().await?);
    }
    let start = Instant::now();
    let end = start + config.duration;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| tokio::spawn(run_client(i, client, shared.clone(), config.clone(), end)))
        .collect();
    let mut histogram = new_histogram();
    let mut handoffs = new_histogram();
    let mut releases = new_histogram();
    let mut per_client = Vec::with_capacity(tasks.len());
    for task in tasks {
        let measured = task
            .await
            .map_err(|e| distlock_core::Error::backend(format!("workload client panicked: {e}")))?;
        per_client.push(measured.count);
        histogram
            .add(&measured.waits)
            .expect("histograms have the same bounds");
        handoffs
            .add(&measured.handoffs)
            .expect("histograms have the same bounds");
        releases
            .add(&measured.releases)
            .expect("histograms have the same bounds");
    }
    let slow_us = SLOW_HANDOFF.as_micros() as u64;
    let slow_handoffs = handoffs
        .iter_recorded()
        .filter(|v| v.value_iterated_to() > slow_us)
        .map(|v| v.count_at_value())
        .sum();
    let acquisitions: u64 = per_client.iter().sum();
    let most = per_client.iter().copied().max().unwrap_or(0);
    let least = per_client.iter().copied().min().unwrap_or(0);
    Ok(WorkloadReport {
        acquisitions,
        per_second: acquisitions as f64 / config.duration.as_secs_f64(),
        wait: summarize(&histogram),
        handoff: summarize(&handoffs),
        slow_handoffs,
        release: summarize(&releases),
        per_client,
        fairness: if most == 0 {
            0.0
        } else {
            least as f64 / most as f64
        },
        violations: shared.violations.load(Ordering::Relaxed),
        token_regressions: shared.regressions.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        first_error: shared
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
    })
}

/// What one client measured.
struct Measured {
    count: u64,
    waits: Histogram<u64>,
    handoffs: Histogram<u64>,
    releases: Histogram<u64>,
}

async fn run_client(
    index: usize,
    client: Arc<DynLockBackend>,
    shared: Arc<Shared>,
    config: WorkloadConfig,
    end: Instant,
) -> Measured {
    let mut histogram = new_histogram();
    let mut handoffs = new_histogram();
    let mut releases = new_histogram();
    let mut count = 0;
    let mut lock_index = index % shared.names.len();
    while Instant::now() < end {
        let wait = end.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        let mut options = AcquireOptions::new().wait(Wait::Timeout(wait));
        options.ttl = config.ttl;
        let access = match config.primitive.access(count) {
            Ok(access) => access,
            Err(e) => {
                shared.record_error(&e);
                break;
            }
        };
        let name = &shared.names[lock_index];
        let asked = Instant::now();
        let granted = match access {
            None => client.acquire(name, &options).await,
            Some(access) => client.acquire_as(name, access, &options).await,
        };
        let guard = match granted {
            Ok(guard) => guard,
            Err(e) if e.kind() == ErrorKind::Timeout && Instant::now() >= end => break,
            Err(e) => {
                shared.record_error(&e);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let acquired = Instant::now();
        if acquired > end {
            drop_release(guard).await;
            break;
        }
        let waited = acquired.duration_since(asked).as_micros() as u64;
        histogram.saturating_record(waited.max(1));
        let released = *lock(&shared.released[lock_index]);
        if access.is_none()
            && let Some(released) = released.filter(|at| *at > asked)
        {
            let gap = acquired.duration_since(released).as_micros() as u64;
            handoffs.saturating_record(gap.max(1));
        }
        let check = &shared.checks[lock_index];
        let entry = check.enter(access, guard.token().get());
        if entry.violation {
            shared.violations.fetch_add(1, Ordering::Relaxed);
        }
        if entry.regression {
            shared.regressions.fetch_add(1, Ordering::Relaxed);
        }
        if !config.hold.is_zero() {
            tokio::time::sleep(config.hold).await;
        }
        check.leave(access);
        let releasing = Instant::now();
        *lock(&shared.released[lock_index]) = Some(releasing);
        if let Err(e) = guard.release().await {
            shared.record_error(&e);
        }
        let took = releasing.elapsed().as_micros() as u64;
        releases.saturating_record(took.max(1));
        count += 1;
        shared.progress.acquisitions.fetch_add(1, Ordering::Relaxed);
        lock_index = (lock_index + 1) % shared.names.len();
        // A backend that grants without waiting (memory, free permits)
        // never suspends this loop: yield, or this client would keep its
        // worker thread and starve the clients queued behind it.
        tokio::task::yield_now().await;
    }
    Measured {
        count,
        waits: histogram,
        handoffs,
        releases,
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

async fn drop_release(guard: distlock_core::LockGuard) {
    let _ = guard.release().await;
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn summarize(histogram: &Histogram<u64>) -> LatencySummary {
    if histogram.is_empty() {
        return LatencySummary::default();
    }
    LatencySummary {
        p50_us: histogram.value_at_quantile(0.50),
        p90_us: histogram.value_at_quantile(0.90),
        p99_us: histogram.value_at_quantile(0.99),
        max_us: histogram.max(),
        mean_us: histogram.mean(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::memory::MemoryBackend;

    /// Free permits are granted without ever suspending the client's loop;
    /// every client must still get its turn, on a runtime with fewer
    /// worker threads than clients.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_client_gets_permits_when_grants_never_wait() {
        let backend = MemoryBackend::new();
        let config = WorkloadConfig {
            clients: 8,
            duration: Duration::from_millis(300),
            primitive: Primitive::Semaphore { permits: 4 },
            name_prefix: "fair".into(),
            ..WorkloadConfig::default()
        };
        let factory = client_factory(move || {
            let backend = backend.clone();
            async move { Ok(backend) }
        });
        let report = run_workload(&config, factory, Arc::default())
            .await
            .expect("workload");
        assert_eq!(report.violations, 0, "{report:?}");
        assert!(
            report.per_client.iter().all(|&n| n > 0),
            "a client never got a permit: {:?}",
            report.per_client
        );
    }
}
