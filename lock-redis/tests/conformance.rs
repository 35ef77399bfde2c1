//! The whole lock-testkit conformance suite against a real Redis, one
//! server per test, each client with its own connections.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{DynElectionBackend, DynLockBackend, LockGuard};
use lock_testkit::conformance::Target;
use lock_testkit::servers::{RedisServer, RespReply};

struct RedisTarget {
    server: RedisServer,
}

async fn redis_target() -> RedisTarget {
    RedisTarget {
        server: support::start_redis().await,
    }
}

#[async_trait]
impl Target for RedisTarget {
    async fn client(&self) -> Arc<DynLockBackend> {
        Arc::new(support::client(&self.server).await)
    }

    async fn election_client(&self) -> Option<Arc<DynElectionBackend>> {
        Some(Arc::new(support::client(&self.server).await))
    }

    fn ttl(&self) -> Duration {
        support::TTL
    }

    /// Deletes the lock key through a separate connection, as expiry would.
    async fn kill_lease(&self, guard: &LockGuard) {
        let reply = self
            .server
            .command(&["DEL", guard.key()])
            .await
            .expect("DEL");
        assert_eq!(
            reply,
            RespReply::Integer(1),
            "no lock key {} to delete",
            guard.key()
        );
    }
}

lock_testkit::conformance_tests!(redis_target().await);
