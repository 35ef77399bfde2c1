//! Leader election on files: a lock in its own directory whose record also
//! holds the leader's value. Observers poll the record (and are woken at
//! once by changes made in the same process).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{LeaderSource, NotifyHint, observe_leaders};
use distlock_core::{
    Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership, LockName,
    Result,
};
use tokio::sync::Notify;

use crate::backend::FileBackend;
use crate::clock;
use crate::keys::{LockPaths, Space};
use crate::store;
use crate::wakeups;

/// How often an observer re-reads the record when nothing woke it.
const OBSERVE_POLL: Duration = Duration::from_millis(20);

impl FileBackend {
    async fn read_leader(&self, name: &LockName, paths: &LockPaths) -> Result<Option<LeaderInfo>> {
        let p = paths.clone();
        let record = self
            .blocking("read the leader of", name, &paths.record, move |_| {
                store::read(&p)
            })
            .await?;
        Ok(record.live_holder(&clock::now()).map(|_| LeaderInfo {
            value: record.value.clone().unwrap_or_default(),
            token: FencingToken(record.token),
            key: format!("{}#{}", paths.record.display(), record.token),
        }))
    }
}

#[async_trait]
impl ElectionBackend for FileBackend {
    /// Waits until leader, then publishes `value` (in the same record write).
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`](distlock_core::LockBackend::acquire): a
    /// cancelled campaign leaves nothing behind.
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
        let value = Some(bid.value.clone());
        let guard = self.acquire_in(Space::Election, name, &bid.options, value, None);
        Ok(Leadership::new(guard.await?, bid.value))
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let paths = self.paths(Space::Election, name);
        self.read_leader(name, &paths).await
    }

    /// Yields the current leader, then every new leader or proclaimed value.
    /// An error is yielded once; a retryable one is followed by more
    /// leaders, any other (a record that cannot be read) ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let paths = self.paths(Space::Election, name);
        let source = RecordSource {
            backend: self.clone(),
            name: name.clone(),
            wake: wakeups::subscribe(&paths.record),
            hint: NotifyHint::new(),
            paths,
        };
        Ok(observe_leaders(source, OBSERVE_POLL))
    }
}

/// The leader record of one election, and this process's notifications of
/// changes to it (changes by other processes are found by polling).
struct RecordSource {
    backend: FileBackend,
    name: LockName,
    paths: LockPaths,
    wake: Arc<Notify>,
    hint: NotifyHint,
}

#[async_trait]
impl LeaderSource for RecordSource {
    /// Enables a wait on the record's notifications, so a write made while
    /// the record is read still wakes the observer.
    fn arm(&mut self) {
        self.hint.arm(self.wake.clone());
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn read(&mut self) -> Result<Option<LeaderInfo>> {
        self.backend.read_leader(&self.name, &self.paths).await
    }

    /// # Cancel safety
    ///
    /// Cancel safe: the armed wait is kept until it resolves or is re-armed.
    async fn changed(&mut self) {
        self.hint.changed().await
    }
}
