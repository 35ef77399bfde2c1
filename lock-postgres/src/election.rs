//! Leader election: a mutex in the `election` space whose grant carries
//! the leader's value. Proclaim updates the value in place (owner-checked)
//! and notifies; observers re-read on every notification of the key, and
//! at least every TTL/3 in case one was lost.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{LeaderSource, NotifyHint, observe_leaders};
use distlock_core::{
    Access, Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership,
    LockName, Result,
};
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
    /// value. An error is yielded once; a retryable one (a lost connection,
    /// a timeout) is followed by more leaders, any other ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        self.table_only("elections")?;
        let key = self.key(Space::Election, name);
        let source = GrantSource {
            watch: self.inner.wakeups.watch(&key, None),
            hint: NotifyHint::new(),
            backend: self.clone(),
            key,
        };
        let reread =
            (self.inner.config.ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(2));
        Ok(observe_leaders(source, reread))
    }
}

/// The granted entry of one election's key, and the key's notifications.
struct GrantSource {
    backend: PostgresBackend,
    key: String,
    watch: KeyWatch,
    hint: NotifyHint,
}

#[async_trait]
impl LeaderSource for GrantSource {
    /// Enables a wait on the key's notifications, so a change committed
    /// while the entries are read still wakes the observer.
    fn arm(&mut self) {
        self.hint.arm(self.watch.listen().clone());
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn read(&mut self) -> Result<Option<LeaderInfo>> {
        self.backend.read_leader(&self.key).await
    }

    /// # Cancel safety
    ///
    /// Cancel safe: the armed wait is kept until it resolves or is re-armed.
    async fn changed(&mut self) {
        self.hint.changed().await
    }
}
