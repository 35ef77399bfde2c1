//! Leader election: a mutex in the `election` space whose grant carries
//! the leader's value. Proclaim updates the value in place
//! (owner-checked); observers read the leader again every TTL/3 (between
//! 50 ms and 2 s), since the server notifies nobody.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::LeaderFilter;
use distlock_core::{
    Access, Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership,
    LockName, Result,
};
use futures::StreamExt;

use crate::backend::{Claim, MysqlBackend};
use crate::keys::Space;

impl MysqlBackend {
    async fn read_leader(&self, key: &str) -> Result<Option<LeaderInfo>> {
        let entries = crate::admin::entries(self, key).await?;
        Ok(entries.into_iter().find(|e| e.granted).map(|e| LeaderInfo {
            value: e.value.unwrap_or_default(),
            token: FencingToken(e.token.unwrap_or(0)),
            key: key.to_owned(),
        }))
    }
}

#[async_trait]
impl ElectionBackend for MysqlBackend {
    /// Waits until leader, then publishes `value` (in the grant itself).
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`](distlock_core::LockBackend::acquire): a
    /// cancelled campaign's queue entry is removed in the background.
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
        let guard = self.acquire_in(Claim {
            space: Space::Election,
            access: Access::Write,
            name,
            options: &bid.options,
            value: Some(bid.value.clone()),
        });
        Ok(Leadership::new(guard.await?, bid.value))
    }

    /// The current leader and its value, if any.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        self.table_only("elections")?;
        self.read_leader(&self.key(Space::Election, name)).await
    }

    /// Yields the current leader, then every new leader or proclaimed
    /// value. An error is yielded once and ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        self.table_only("elections")?;
        let observer = Observer {
            backend: self.clone(),
            key: self.key(Space::Election, name),
            filter: LeaderFilter::new(),
            reread: (self.inner.config.ttl / 3)
                .clamp(Duration::from_millis(50), Duration::from_secs(2)),
            first: true,
            done: false,
        };
        Ok(futures::stream::unfold(observer, |mut o| async move {
            let next = o.next().await?;
            Some((next, o))
        })
        .boxed())
    }
}

struct Observer {
    backend: MysqlBackend,
    key: String,
    filter: LeaderFilter,
    reread: Duration,
    first: bool,
    done: bool,
}

impl Observer {
    async fn next(&mut self) -> Option<Result<LeaderInfo>> {
        if self.done {
            return None;
        }
        loop {
            if !std::mem::take(&mut self.first) {
                tokio::time::sleep(self.reread).await;
            }
            match self.backend.read_leader(&self.key).await {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(Some(info)) if self.filter.admit(&info) => return Some(Ok(info)),
                Ok(_) => {}
            }
        }
    }
}
