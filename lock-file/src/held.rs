//! The file backend's round trips on a held lock: renewal, release,
//! proclaim. distlock-core keeps the lease (validity, renewal, lost signal).

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::LossNotifier;
use distlock_core::{Error, LockName, LostReason, Result};

use crate::backend::FileBackend;
use crate::clock::ttl_ms;
use crate::errors::gone_error;
use crate::flock::Bound;
use crate::keys::{LockPaths, Space};
use crate::store::{self, Gone, Update};
use crate::wakeups;

/// One acquisition: whose it is (`holder`) and where its record lives.
#[derive(Debug)]
pub(crate) struct FileLease {
    pub(crate) backend: FileBackend,
    pub(crate) space: Space,
    pub(crate) name: LockName,
    pub(crate) paths: LockPaths,
    pub(crate) holder: String,
    pub(crate) token: u64,
    pub(crate) ttl: Duration,
    /// The guard's lost signal, fired with `Revoked` when an operator broke
    /// the lock (the renewal loop would only know that it failed).
    pub(crate) notifier: LossNotifier,
}

impl FileLease {
    /// The error for `gone`, telling the guard first if it was revoked.
    fn gone(&self, gone: Gone, op: &str) -> Error {
        if gone == Gone::Revoked {
            self.notifier.fire(LostReason::Revoked);
        }
        gone_error(
            gone,
            op,
            crate::keys::kind(self.space),
            &self.name,
            self.token,
            &self.paths.record,
        )
    }
}

#[async_trait]
impl distlock_core::raw::Lease for FileLease {
    /// Pushes the on-disk deadline to now + TTL, or reports the lease gone.
    /// Runs in the backend's renewal lane, batched with other renewals.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before a worker starts it, the renewal is
    /// skipped; after, it completes, and only pushes a deadline this holder
    /// still holds.
    async fn renew(&self) -> Result<()> {
        self.backend
            .renew_in_lane(&self.name, &self.paths, &self.holder, ttl_ms(self.ttl))
            .await?
            .map_err(|gone| self.gone(gone, "renew"))
    }

    async fn release(&self) -> Result<()> {
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let fsync = self.backend.config().fsync;
        let released = self
            .backend
            .blocking("release", &self.name, &self.paths.record, move |bound| {
                store::update(&paths, &holder, Update::Release, fsync, bound)
            })
            .await?;
        match released {
            Ok(()) => {
                wakeups::notify(&self.paths.record);
                tracing::debug!(backend = "file", lock = %self.name, token = self.token, "released");
                Ok(())
            }
            Err(gone) => Err(self.gone(gone, "release")),
        }
    }

    /// Deletes the record synchronously: a guard dropped with no runtime
    /// still frees the lock at once.
    fn release_blocking(&self) {
        let bound = Bound::within(self.backend.config().request_timeout);
        let released = store::update(
            &self.paths,
            &self.holder,
            Update::Release,
            self.backend.config().fsync,
            &bound,
        );
        if released.is_ok_and(|r| r.is_ok()) {
            wakeups::notify(&self.paths.record);
        }
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if self.space != Space::Election {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        let value = value.to_vec();
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let fsync = self.backend.config().fsync;
        self.backend
            .blocking(
                "proclaim on",
                &self.name,
                &self.paths.record,
                move |bound| store::proclaim(&paths, &holder, value, fsync, bound),
            )
            .await?
            .map_err(|gone| self.gone(gone, "proclaim on"))?;
        wakeups::notify(&self.paths.record);
        Ok(())
    }
}
