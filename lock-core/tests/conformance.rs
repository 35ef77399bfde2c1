//! The whole conformance suite against the in-memory backend.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::memory::MemoryBackend;
use distlock_core::{DynElectionBackend, LockGuard};
use distlock_testkit::conformance::Target;

/// One in-process "server" shared by all clients of a test.
struct MemoryTarget {
    server: MemoryBackend,
}

const TTL: Duration = Duration::from_millis(400);

fn memory_target() -> MemoryTarget {
    MemoryTarget {
        server: MemoryBackend::new().with_default_ttl(TTL).unwrap(),
    }
}

#[async_trait]
impl Target for MemoryTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(self.server.clone())
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        assert!(self.server.expire_now(guard.name()), "no holder to expire");
    }
}

distlock_testkit::conformance_tests!(memory_target());
