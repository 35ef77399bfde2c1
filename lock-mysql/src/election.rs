//! Leader election: a mutex in the `election` space whose grant carries
//! the leader's value. Proclaim updates the value in place
//! (owner-checked); observers read the leader again every TTL/3 (between
//! 50 ms and 2 s), since the server notifies nobody.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{LeaderSource, observe_leaders};
use distlock_core::{
    Access, Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership,
    LockName, Result,
};

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
    /// value. An error is yielded once; a retryable one (a lost connection,
    /// a timeout) is followed by more leaders, any other ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        self.table_only("elections")?;
        let source = GrantSource {
            backend: self.clone(),
            key: self.key(Space::Election, name),
        };
        let reread =
            (self.inner.config.ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(2));
        Ok(observe_leaders(source, reread))
    }
}

/// The granted entry of one election's key. The server notifies nobody, so
/// there is no hint: the loop re-reads every interval.
struct GrantSource {
    backend: MysqlBackend,
    key: String,
}

#[async_trait]
impl LeaderSource for GrantSource {
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn read(&mut self) -> Result<Option<LeaderInfo>> {
        self.backend.read_leader(&self.key).await
    }

    /// Never resolves: MySQL sends no notifications.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it does nothing.
    async fn changed(&mut self) {
        std::future::pending().await
    }
}
