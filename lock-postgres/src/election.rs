//! Leader election: a mutex in the `election` space whose grant carries
//! the leader's value. Proclaim updates the value in place (owner-checked)
//! and notifies; observers re-read on every notification of the key, and
//! at least every TTL/3 in case one was lost.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::LeaderFilter;
use distlock_core::{
    Access, Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership,
    LockName, Result,
};
use futures::StreamExt;
use tokio_postgres::types::Type;

use crate::backend::{Claim, PostgresBackend};
use crate::keys::Space;
use crate::wakeups::KeyWatch;

impl PostgresBackend {
    async fn read_leader(&self, key: &str) -> Result<Option<LeaderInfo>> {
        let sql = &self.inner.sql.entries_of;
        let rows = self
            .inner
            .pool
            .run(&format!("read the leader of {key}"), |client| async move {
                client.query_typed(sql, &[(&key, Type::TEXT)]).await
            })
            .await?;
        Ok(rows.iter().find(|row| row.get::<_, bool>(1)).map(|row| {
            let token: Option<i64> = row.get(2);
            let value: Option<Vec<u8>> = row.get(4);
            LeaderInfo {
                value: value.unwrap_or_default(),
                token: FencingToken(token.and_then(|t| u64::try_from(t).ok()).unwrap_or(0)),
                key: key.to_owned(),
            }
        }))
    }
}

#[async_trait]
impl ElectionBackend for PostgresBackend {
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
        let key = self.key(Space::Election, name);
        let observer = Observer {
            watch: self.inner.wakeups.watch(&key, None),
            backend: self.clone(),
            key,
            filter: LeaderFilter::new(),
            reread: (self.inner.config.ttl / 3)
                .clamp(Duration::from_millis(50), Duration::from_secs(2)),
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
    backend: PostgresBackend,
    key: String,
    watch: KeyWatch,
    filter: LeaderFilter,
    reread: Duration,
    done: bool,
}

impl Observer {
    async fn next(&mut self) -> Option<Result<LeaderInfo>> {
        if self.done {
            return None;
        }
        loop {
            let woken = self.watch.listen().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.backend.read_leader(&self.key).await {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(Some(info)) if self.filter.admit(&info) => return Some(Ok(info)),
                Ok(_) => {}
            }
            let _ = tokio::time::timeout(self.reread, woken).await;
        }
    }
}
