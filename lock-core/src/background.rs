//! Background work that outlives the call that started it, and a way to
//! wait for it before the runtime shuts down.
//!
//! A dropped guard releases its lock in the background, and a cancelled
//! acquisition removes its queue entry in the background. When a Tokio
//! runtime shuts down, tasks it has not finished are dropped, and that work
//! never happens: the lock stays taken until its TTL. Backends start such
//! work with [`spawn`]; a program about to exit calls [`wait_for_background`].

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static IDLE: Notify = Notify::const_new();

/// Counts one piece of work for as long as it lives, even if its task is dropped.
struct Counted;

impl Counted {
    fn new() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if IN_FLIGHT.fetch_sub(1, Ordering::SeqCst) == 1 {
            IDLE.notify_waiters();
        }
    }
}

/// Runs `work` on the current Tokio runtime, counted until it finishes.
/// Returns `false` (and drops `work`) when no runtime is running.
pub fn spawn<F>(work: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    spawn_on(&runtime, work);
    true
}

/// Runs `work` on `runtime`, counted until it finishes: for a backend that
/// keeps a handle on the runtime its connections live on, so that clean-up
/// can start from any thread. The handle can be awaited for the work's end,
/// or dropped: the work goes on either way.
pub fn spawn_on<F>(runtime: &tokio::runtime::Handle, work: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let counted = Counted::new();
    runtime.spawn(async move {
        let _counted = counted;
        work.await;
    })
}

/// Runs clean-up `work` in the background and waits for it, at most
/// `within`: an acquisition that gives up (its wait ran out) has undone
/// what it left on the server before it returns, and a caller cancelled
/// meanwhile does not cut the clean-up short. Returns whether it finished.
///
/// Must be called within a Tokio runtime.
///
/// # Cancel safety
///
/// Cancel safe: cancelling stops only the wait; the work goes on, counted
/// by [`wait_for_background`].
pub async fn finish<F>(within: Duration, work: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    let task = spawn_on(&tokio::runtime::Handle::current(), work);
    matches!(tokio::time::timeout(within, task).await, Ok(Ok(())))
}

/// How many pieces of background work are still running, in this process.
pub fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::SeqCst)
}

/// Waits until the background work of every backend in this process has
/// finished (releases of dropped guards, clean-up after cancelled
/// acquisitions), at most `within`. Returns whether it all finished.
///
/// Call it at the end of `main`, before the runtime shuts down: a guard
/// dropped just before then is released rather than left to its TTL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// use std::time::Duration;
/// use distlock_core::{LockBackendExt, memory::MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let guard = backend.lock("jobs/nightly").await?;
/// drop(guard); // released in the background
/// assert!(distlock_core::wait_for_background(Duration::from_secs(5)).await);
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// Cancel safe: it only observes.
pub async fn wait_for_background(within: Duration) -> bool {
    let waiting = async {
        loop {
            let idle = IDLE.notified();
            if in_flight() == 0 {
                return;
            }
            idle.await;
        }
    };
    tokio::time::timeout(within, waiting).await.is_ok()
}
