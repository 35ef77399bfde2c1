//! One acquisition attempt in flight, released if it is abandoned after it won.

use std::path::PathBuf;
use std::time::Duration;

use distlock_core::{LockName, Result};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::backend::{FileBackend, REPORT_GRACE};
use crate::clock::ttl_ms;
use crate::errors::{Unfinished, io_error, unfinished};
use crate::flock::{Bound, CancelOnDrop};
use crate::keys::LockPaths;
use crate::store::{self, Attempt, Claim, Update};
use crate::wakeups;

/// One in-flight acquisition attempt and its clean-up: if it is dropped before its outcome was
/// taken (cancellation or timeout), a granted lock is released in the background.
pub(crate) struct AcquireCleanup {
    handle: Option<JoinHandle<std::io::Result<Attempt>>>,
    limit: Duration,
    request_timeout: Duration,
    cancel: Option<CancelOnDrop>,
    paths: LockPaths,
    holder: String,
    fsync: bool,
}

impl AcquireCleanup {
    pub(crate) fn start(
        backend: &FileBackend,
        paths: &LockPaths,
        holder: &str,
        ttl: Duration,
        claim: Claim,
        limit: Duration,
    ) -> Self {
        let fsync = backend.config().fsync;
        let bound = Bound::within(limit);
        let cancel = bound.cancel_on_drop();
        let handle = tokio::task::spawn_blocking({
            let (paths, holder) = (paths.clone(), holder.to_owned());
            move || store::try_acquire(&paths, &holder, ttl_ms(ttl), claim, fsync, &bound)
        });
        AcquireCleanup {
            handle: Some(handle),
            limit,
            request_timeout: backend.config().request_timeout,
            cancel: Some(cancel),
            paths: paths.clone(),
            holder: holder.to_owned(),
            fsync,
        }
    }

    pub(crate) async fn outcome(&mut self, name: &LockName) -> Result<Attempt> {
        let limit = self.limit;
        let path: PathBuf = self.paths.record.clone();
        let handle = self.handle.as_mut().expect("outcome is taken once");
        let joined = timeout(limit + REPORT_GRACE, handle)
            .await
            .map_err(|_| unfinished("acquire", name, &path, Unfinished::TookLonger(limit)))?;
        self.handle = None;
        match joined {
            Ok(Ok(attempt)) => Ok(attempt),
            Ok(Err(e)) => Err(io_error(e, "acquire", name, &path)),
            Err(join) => Err(unfinished(
                "acquire",
                name,
                &path,
                Unfinished::Failed(&join),
            )),
        }
    }
}

impl Drop for AcquireCleanup {
    fn drop(&mut self) {
        // Stop the attempt's wait for the OS lock; if it already took the
        // lock, release it.
        drop(self.cancel.take());
        let Some(handle) = self.handle.take() else {
            return;
        };
        let (paths, holder, fsync) = (self.paths.clone(), self.holder.clone(), self.fsync);
        let limit = self.request_timeout;
        distlock_core::raw::spawn_background(async move {
            if let Ok(Ok(Attempt::Granted { token })) = handle.await {
                let p = paths.clone();
                let bound = Bound::within(limit);
                let released = tokio::task::spawn_blocking(move || {
                    store::update(&p, &holder, Update::Release, fsync, &bound)
                })
                .await;
                tracing::debug!(
                    backend = "file",
                    token,
                    ?released,
                    "released the lock of a cancelled acquisition"
                );
                wakeups::notify(&paths.record);
            }
        });
    }
}
