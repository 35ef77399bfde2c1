//! Taking a record's OS lock (`flock`) without ever blocking in the kernel.
//!
//! A process stopped or hung while it holds the `flock` (inside a transaction
//! of a few microseconds) would otherwise block every other process, and
//! each thread that called `flock`, for as long as it stays stopped. So the
//! lock is tried without blocking (`LOCK_NB`) and retried with short sleeps
//! until the caller's [`Bound`] runs out or the caller gives up.

use std::fs::{File, TryLockError};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// First retry interval; it doubles up to [`MAX_RETRY`].
const MIN_RETRY: Duration = Duration::from_micros(50);
/// Longest retry interval: small next to a transaction with `fsync`.
const MAX_RETRY: Duration = Duration::from_millis(2);

/// How long a transaction may wait for the `flock`, and whether its caller
/// still wants the result.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
}

impl Bound {
    /// A bound of `limit` from now.
    pub(crate) fn within(limit: Duration) -> Self {
        let now = Instant::now();
        Bound {
            deadline: now
                .checked_add(limit)
                .unwrap_or(now + Duration::from_secs(86_400)),
            cancelled: Arc::default(),
        }
    }

    /// A guard that gives up the wait when dropped: hold it in the future
    /// that awaits the transaction, so a cancelled or timed-out caller frees
    /// the thread at its next retry.
    pub(crate) fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.cancelled.clone())
    }

    /// Whether the caller gave up waiting for the operation.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// Cancels its [`Bound`] when dropped.
#[derive(Debug)]
pub(crate) struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Takes the exclusive `flock` on `file` (at `path`) within `bound`.
///
/// Fails with `TimedOut` when another process kept it past the bound (the
/// message says how to find that process), and with `Interrupted` when the
/// caller gave up.
pub(crate) fn lock(file: &File, path: &Path, bound: &Bound) -> io::Result<()> {
    let start = Instant::now();
    let mut retry = MIN_RETRY;
    loop {
        if bound.is_cancelled() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the caller stopped waiting for the OS lock",
            ));
        }
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::Error(e)) => return Err(e),
            Err(TryLockError::WouldBlock) => {}
        }
        let now = Instant::now();
        if now >= bound.deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "another process held the OS lock on {} for {:?}, longer than this \
                     operation may wait; a process stopped or hung inside a transaction on \
                     this lock blocks it until that process resumes or exits \
                     (`fuser -v {}` names it)",
                    path.display(),
                    now - start,
                    path.display()
                ),
            ));
        }
        std::thread::sleep(retry.min(bound.deadline - now));
        retry = (retry * 2).min(MAX_RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_busy_lock_times_out_and_a_cancelled_wait_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = open(&path);
        held.lock().unwrap();
        let other = open(&path);
        let err = lock(&other, &path, &Bound::within(Duration::from_millis(20))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("x.lock"), "{err}");

        let bound = Bound::within(Duration::from_secs(60));
        drop(bound.cancel_on_drop());
        let err = lock(&other, &path, &bound).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);

        drop(held);
        lock(&other, &path, &Bound::within(Duration::from_millis(20))).unwrap();
    }
}
