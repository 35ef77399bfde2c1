//! A waiter's place in the lock's queue of waiters ([`crate::queue`]).

use std::time::Duration;

use distlock_core::{Access, LockName, Result};
use tokio::time::Instant;

use crate::backend::FileBackend;
use crate::flock::Bound;
use crate::keys::LockPaths;
use crate::queue::ENTRY_RENEW;
use crate::store;

/// Longest wait for the OS lock when giving up a place.
const LEAVE_WAIT: Duration = Duration::from_millis(50);

/// A waiter's place in the lock's queue ([`crate::queue`]). Taken at its
/// first wait and renewed while it waits; a waiter that gives up leaves the
/// queue, and one dropped while waiting leaves it in the background.
pub(crate) struct Place {
    paths: LockPaths,
    holder: String,
    /// How the waiter is described to operators.
    description: Option<String>,
    /// What it waits for, in the shared spaces.
    access: Option<Access>,
    request_timeout: Duration,
    /// When the place was last taken or renewed; `None` while it has none.
    renewed: Option<Instant>,
}

impl Place {
    pub(crate) fn new(
        backend: &FileBackend,
        paths: &LockPaths,
        holder: &str,
        description: Option<String>,
        access: Option<Access>,
    ) -> Self {
        Place {
            paths: paths.clone(),
            holder: holder.to_owned(),
            description,
            access,
            request_timeout: backend.config().request_timeout,
            renewed: None,
        }
    }

    pub(crate) fn is_due(&self) -> bool {
        self.renewed.is_none_or(|at| at.elapsed() >= ENTRY_RENEW)
    }

    /// Takes or renews the place, waiting for the OS lock up to `limit`.
    pub(crate) async fn keep(
        &mut self,
        backend: &FileBackend,
        name: &LockName,
        limit: Duration,
    ) -> Result<()> {
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let (description, access) = (self.description.clone(), self.access);
        let at = Instant::now();
        backend
            .blocking_within(limit, "queue for", name, &self.paths.queue, move |bound| {
                store::enroll(&paths, &holder, description.as_deref(), access, bound)
            })
            .await?;
        self.renewed = Some(at);
        Ok(())
    }

    /// The lock was granted, which took us out of the queue.
    pub(crate) fn granted(&mut self) {
        self.renewed = None;
    }

    /// Gives up the place now, waiting for the OS lock at most
    /// [`LEAVE_WAIT`] so a waiter that gives up is not held past its wait;
    /// if that fails the place lapses within [`crate::queue::ENTRY_LEASE`].
    pub(crate) async fn leave(&mut self, backend: &FileBackend, name: &LockName) {
        if self.renewed.take().is_none() {
            return;
        }
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let left = backend
            .blocking_within(
                LEAVE_WAIT,
                "leave the queue of",
                name,
                &self.paths.queue,
                move |bound| store::leave(&paths, &holder, bound),
            )
            .await;
        if let Err(e) = left {
            tracing::debug!(backend = "file", lock = %name, error = %e, "could not leave the queue");
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.renewed.take().is_none() {
            return;
        }
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let bound = Bound::within(self.request_timeout);
        distlock_core::raw::spawn_background(async move {
            let _ =
                tokio::task::spawn_blocking(move || store::leave(&paths, &holder, &bound)).await;
        });
    }
}
