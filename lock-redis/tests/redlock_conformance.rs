//! The whole lock-testkit conformance suite against Redlock on three real,
//! independent Redis servers.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{DynElectionBackend, DynLockBackend, LockGuard};
use lock_testkit::conformance::Target;
use lock_testkit::servers::{RedisServers, RespReply};

struct RedlockTarget {
    servers: RedisServers,
}

async fn redlock_target() -> RedlockTarget {
    RedlockTarget {
        servers: support::start_redises(3).await,
    }
}

#[async_trait]
impl Target for RedlockTarget {
    async fn client(&self) -> Arc<DynLockBackend> {
        Arc::new(support::redlock_client(&self.servers).await)
    }

    async fn election_client(&self) -> Option<Arc<DynElectionBackend>> {
        Some(Arc::new(support::redlock_client(&self.servers).await))
    }

    fn ttl(&self) -> Duration {
        support::TTL
    }

    /// Deletes the lock key on every server, as expiry would.
    async fn kill_lease(&self, guard: &LockGuard) {
        let mut deleted = 0;
        for server in self.servers.servers() {
            if server.command(&["DEL", guard.key()]).await.expect("DEL") == RespReply::Integer(1) {
                deleted += 1;
            }
        }
        assert!(
            deleted >= 2,
            "lock key {} held on only {deleted} servers",
            guard.key()
        );
    }
}

lock_testkit::conformance_tests!(redlock_target().await);
