//! The whole conformance suite against the file backend: every client is a
//! separate `FileBackend` on one shared temporary directory, as separate
//! processes would be.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockGuard};
use distlock_file::FileBackend;
use distlock_testkit::conformance::Target;
use tempfile::TempDir;

mod support;

/// Long enough that renewal (every TTL/3, one fsync'd write that may wait
/// for the record's OS lock behind eight contenders) keeps up on a busy
/// two-core machine; short enough to keep the expiry tests quick.
const TTL: Duration = Duration::from_millis(2000);

struct FileTarget {
    dir: TempDir,
}

impl FileTarget {
    async fn backend(&self) -> FileBackend {
        support::client(self.dir.path(), Some(TTL)).await
    }
}

fn file_target() -> FileTarget {
    FileTarget {
        dir: tempfile::tempdir().expect("temp dir"),
    }
}

#[async_trait]
impl Target for FileTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(self.backend().await)
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        let ended = self
            .backend()
            .await
            .expire_now(guard.name())
            .await
            .expect("expire");
        assert!(ended, "no holder to expire");
    }
}

distlock_testkit::conformance_tests!(file_target());
