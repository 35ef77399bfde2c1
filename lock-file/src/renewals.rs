//! Lease renewals of one backend, run in batches by a few threads of their own.
//!
//! A process may hold thousands of locks, each renewed every TTL/3 with a
//! record write and its `fsync`s. Run as one blocking task each, a wave of
//! renewals fills the runtime's blocking pool (hundreds of threads, each
//! with its stack) and queues acquisitions behind it past their bound. So
//! renewals have a lane of their own: a queue served by at most
//! [`WORKERS`] threads, which never compete with acquisitions for the
//! blocking pool. A worker takes its share of the queue (up to [`BATCH`]
//! renewals) at a time, renews each record under its `flock` with the owner
//! check, `fsync`ing the record before its `rename` (so a crash leaves the
//! old or the new record),
//! then `fsync`s each directory the batch renamed in once, and only then
//! reports the renewals done. Several workers keep several `fsync`s in
//! flight, which the filesystem's journal commits together.
//!
//! A renewal that panics is answered [`Answer::Panicked`] (its lease can no
//! longer be vouched for) and its worker goes on with the rest of the batch.
//! A worker that panics anywhere else gives its slot back as it unwinds, and
//! starts a replacement when renewals are queued, so the lane never runs
//! short of threads.

use std::collections::VecDeque;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::flock::Bound;
use crate::keys::LockPaths;
use crate::record::{self, Durability};
use crate::store::{self, Gone, Update};

/// Most threads renewing at once: enough `fsync`s in flight for the journal
/// to commit them in groups, few enough stacks to stay small per lock.
const WORKERS: usize = 16;
/// Most renewals a worker takes before it `fsync`s their directories; it
/// takes fewer (its share of the queue) when the queue is short.
const BATCH: usize = 32;
/// How long an idle worker waits for more renewals before it exits.
const IDLE: Duration = Duration::from_secs(5);

/// What a renewal found: renewed, or the lease is gone.
pub(crate) type Renewed = io::Result<Result<(), Gone>>;

/// The lane's answer to one renewal.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The renewal ran to its end and found this.
    Done(Renewed),
    /// The renewal panicked, with this message: whether the record was
    /// renewed is unknown, and a lease nobody can renew reliably is lost.
    Panicked(String),
}

/// One renewal waiting for a worker.
struct Job {
    paths: LockPaths,
    holder: String,
    ttl_ms: u64,
    bound: Bound,
    reply: oneshot::Sender<Answer>,
}

/// The renewal lane of one backend (shared by its clones).
#[derive(Debug, Clone)]
pub(crate) struct RenewalLane {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    fsync: bool,
    state: Mutex<State>,
    more: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    workers: usize,
    idle: usize,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("queued", &self.queue.len())
            .field("workers", &self.workers)
            .finish()
    }
}

impl RenewalLane {
    /// An empty lane; workers start with the first renewal.
    pub(crate) fn new(fsync: bool) -> Self {
        RenewalLane {
            inner: Arc::new(Inner {
                fsync,
                state: Mutex::default(),
                more: Condvar::new(),
            }),
        }
    }

    /// Queues the renewal of `holder`'s lease on `paths` to now + `ttl_ms`.
    /// The answer comes on the returned channel; a renewal whose `bound` is
    /// cancelled before a worker reaches it is skipped (its channel closes).
    pub(crate) fn submit(
        &self,
        paths: LockPaths,
        holder: String,
        ttl_ms: u64,
        bound: Bound,
    ) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        let mut state = self.inner.state();
        state.queue.push_back(Job {
            paths,
            holder,
            ttl_ms,
            bound,
            reply,
        });
        if state.idle > 0 {
            self.inner.more.notify_one();
        } else if state.workers < WORKERS {
            self.inner.spawn_worker(&mut state);
        }
        answer
    }

    /// How many workers the lane counts as running.
    #[cfg(test)]
    pub(crate) fn workers(&self) -> usize {
        self.inner.state().workers
    }
}

/// A worker's place in [`State::workers`], given back if the worker
/// unwinds (a worker that ends normally gives it back itself, under the
/// same lock that saw the queue empty).
struct Slot(Arc<Inner>);

impl Drop for Slot {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut state = self.0.state();
        state.workers -= 1;
        if !state.queue.is_empty() && state.idle == 0 {
            self.0.spawn_worker(&mut state);
        }
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts one more worker and counts it in `state`.
    fn spawn_worker(self: &Arc<Self>, state: &mut State) {
        let slot = Slot(self.clone());
        let spawned = std::thread::Builder::new()
            .name("distlock-file-renew".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || slot.0.work(&slot));
        // Without a thread the job waits for a running worker, or
        // times out and the renewal is retried.
        if spawned.is_ok() {
            state.workers += 1;
        }
    }

    /// A worker holding `_slot`: renews batches until the queue stays
    /// empty for [`IDLE`].
    fn work(&self, _slot: &Slot) {
        loop {
            let batch: Vec<Job> = {
                let mut state = self.state();
                while state.queue.is_empty() {
                    state.idle += 1;
                    let (next, waited) = self
                        .more
                        .wait_timeout(state, IDLE)
                        .unwrap_or_else(|p| p.into_inner());
                    state = next;
                    state.idle -= 1;
                    if waited.timed_out() && state.queue.is_empty() {
                        state.workers -= 1;
                        return;
                    }
                }
                // Spread what is queued over the workers: a batch is
                // answered only when all of it is done, so a big batch
                // while others idle would only delay its renewals.
                let n = state.queue.len().div_ceil(state.workers.max(1)).min(BATCH);
                state.queue.drain(..n).collect()
            };
            #[cfg(test)]
            tests::hook::batch(&batch);
            self.renew_batch(batch);
        }
    }

    /// Renews every live job of `batch`, `fsync`s the directories written
    /// in, then answers.
    fn renew_batch(&self, batch: Vec<Job>) {
        let durability = if self.fsync {
            Durability::DirectoryLater
        } else {
            Durability::Unsynced
        };
        let mut done: Vec<(Job, Renewed)> = Vec::with_capacity(batch.len());
        let mut dirs: Vec<PathBuf> = Vec::new();
        for job in batch {
            if job.bound.is_cancelled() {
                continue;
            }
            let renewed = match catch_unwind(AssertUnwindSafe(|| renew(&job, durability))) {
                Ok(renewed) => renewed,
                Err(panic) => {
                    let why = panic_message(panic.as_ref());
                    tracing::error!(
                        backend = "file",
                        record = %job.paths.record.display(),
                        panic = %why,
                        "a lease renewal panicked; the lease is reported lost"
                    );
                    let _ = job.reply.send(Answer::Panicked(why));
                    continue;
                }
            };
            if matches!(renewed, Ok(Ok(()))) && self.fsync {
                let dir = job.paths.dir();
                if !dirs.iter().any(|d| d == dir) {
                    dirs.push(dir.to_owned());
                }
            }
            done.push((job, renewed));
        }
        let mut failed: Vec<(PathBuf, io::Error)> = Vec::new();
        for dir in dirs {
            if let Err(e) = record::sync_dir(&dir) {
                failed.push((dir, e));
            }
        }
        for (job, mut renewed) in done {
            if matches!(renewed, Ok(Ok(()))) {
                let dir = job.paths.dir();
                if let Some((_, e)) = failed.iter().find(|(d, _)| d == dir) {
                    // The new deadline may not survive an OS crash; the
                    // lease still runs in this boot, so this is an unknown
                    // outcome, retried like any other.
                    renewed = Err(io::Error::new(e.kind(), e.to_string()));
                }
            }
            // The caller may have stopped waiting: nothing to tell then.
            let _ = job.reply.send(Answer::Done(renewed));
        }
    }
}

/// Renews `job`'s lease in its record, written with `durability`.
fn renew(job: &Job, durability: Durability) -> Renewed {
    #[cfg(test)]
    tests::hook::renewal(&job.paths);
    let update = Update::Renew { ttl_ms: job.ttl_ms };
    store::update(&job.paths, &job.holder, update, durability, &job.bound)
}

/// The message a panic was raised with, as far as it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests;
