//! The file backend's side of a held lock: renewal, release, proclaim.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::renewal::RenewalTask;
use lock_core::{Error, HeldLock, LockName, LossNotifier, LostReason, Result};

use crate::backend::FileBackend;
use crate::clock::ttl_ms;
use crate::errors::gone_error;
use crate::paths::{LockPaths, Space};
use crate::store;
use crate::wakeups;

/// One acquisition: whose it is (`holder`) and where its record lives.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) backend: FileBackend,
    pub(crate) space: Space,
    pub(crate) name: LockName,
    pub(crate) paths: LockPaths,
    pub(crate) holder: String,
    pub(crate) token: u64,
    pub(crate) ttl: Duration,
}

impl Lease {
    /// Pushes the on-disk deadline to now + TTL, or reports the lease gone.
    pub(crate) async fn renew(&self) -> Result<()> {
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let (ttl, fsync) = (ttl_ms(self.ttl), self.backend.config().fsync);
        self.backend
            .blocking("renew", &self.name, &self.paths.record, move || {
                store::renew(&paths, &holder, ttl, fsync)
            })
            .await?
            .map_err(|gone| gone_error(gone, "renew", &self.name, self.token))
    }

    async fn release(&self) -> Result<()> {
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let fsync = self.backend.config().fsync;
        let released = self
            .backend
            .blocking("release", &self.name, &self.paths.record, move || {
                store::release(&paths, &holder, fsync)
            })
            .await?;
        match released {
            Ok(()) => {
                wakeups::notify(&self.paths.record);
                tracing::debug!(backend = "file", lock = %self.name, token = self.token, "released");
                Ok(())
            }
            Err(gone) => Err(gone_error(gone, "release", &self.name, self.token)),
        }
    }

    async fn proclaim(&self, value: Vec<u8>) -> Result<()> {
        let (paths, holder) = (self.paths.clone(), self.holder.clone());
        let fsync = self.backend.config().fsync;
        self.backend
            .blocking("proclaim on", &self.name, &self.paths.record, move || {
                store::proclaim(&paths, &holder, value, fsync)
            })
            .await?
            .map_err(|gone| gone_error(gone, "proclaim on", &self.name, self.token))?;
        wakeups::notify(&self.paths.record);
        Ok(())
    }
}

/// A held lock or leadership: the lease plus its renewal loop and lost signal.
#[derive(Debug)]
pub(crate) struct FileHeld {
    lease: Arc<Lease>,
    notifier: LossNotifier,
    renewal: RenewalTask,
}

impl FileHeld {
    pub(crate) fn new(lease: Arc<Lease>, notifier: LossNotifier, renewal: RenewalTask) -> Self {
        FileHeld {
            lease,
            notifier,
            renewal,
        }
    }
}

#[async_trait]
impl HeldLock for FileHeld {
    async fn renew(&self) -> Result<()> {
        let result = self.lease.renew().await;
        if let Err(e) = &result
            && matches!(
                e.kind(),
                lock_core::ErrorKind::LeaseLost | lock_core::ErrorKind::NotHeld
            )
        {
            self.notifier.fire(LostReason::RenewalFailed(e.to_string()));
        }
        result
    }

    async fn release(self: Box<Self>) -> Result<()> {
        let FileHeld {
            lease,
            notifier,
            renewal,
        } = *self;
        drop(renewal);
        let result = lease.release().await;
        notifier.fire(LostReason::Released);
        result
    }

    fn abandon(self: Box<Self>) {
        // Dropping the renewal task stops renewal; the on-disk deadline runs out.
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        if self.lease.space != Space::Election {
            return Err(Error::unsupported(
                "proclaim is only available on a leadership",
            ));
        }
        self.lease.proclaim(value.to_vec()).await
    }
}
