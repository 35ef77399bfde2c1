//! Leader election on files: a lock in its own directory whose record also
//! holds the leader's value. Observers poll the record (and are woken at
//! once by changes made in the same process).

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::LeaderFilter;
use distlock_core::{
    Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership, LockName,
    Result,
};
use futures::StreamExt;
use tokio::time::timeout;

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
    /// An I/O error is yielded once and ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let paths = self.paths(Space::Election, name);
        let state = Observer {
            backend: self.clone(),
            name: name.clone(),
            wake: wakeups::subscribe(&paths.record),
            paths,
            filter: LeaderFilter::new(),
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut state| async move {
            let next = state.next().await?;
            Some((next, state))
        })
        .boxed())
    }
}

struct Observer {
    backend: FileBackend,
    name: LockName,
    paths: LockPaths,
    wake: std::sync::Arc<tokio::sync::Notify>,
    filter: LeaderFilter,
    done: bool,
}

impl Observer {
    async fn next(&mut self) -> Option<Result<LeaderInfo>> {
        if self.done {
            return None;
        }
        loop {
            let notified = self.wake.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match self.backend.read_leader(&self.name, &self.paths).await {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(Some(info)) if self.filter.admit(&info) => return Some(Ok(info)),
                Ok(_) => {}
            }
            let _ = timeout(OBSERVE_POLL, notified).await;
        }
    }
}
