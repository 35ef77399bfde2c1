//! `examples/fenced_redis.rs` on real servers: the counter lives in a real
//! Redis, the lock comes from each backend in turn, and the example must
//! exit 0 (every stale write refused, the counter exact).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use lock_testkit::assert::started;
use lock_testkit::servers::RedisServer;
use tokio::process::Command;

/// One run: the stale worker's lease (1 s, or a ZooKeeper session) and a
/// dozen short turns, with room for a loaded machine.
const BOUND: Duration = Duration::from_secs(90);

/// The example binary, built by `cargo test` beside this test's binary.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join("examples").join("fenced_redis");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --features redis --example fenced_redis` \
         (cargo test builds it)",
        binary.display()
    );
    binary
}

/// Runs the example with the lock at `lock_url` and the counter in `redis`.
async fn runs_fenced(lock_url: &str, redis: &RedisServer) {
    let child = Command::new(example_binary())
        .env_clear()
        .env("DISTLOCK_URL", lock_url)
        .env("REDIS_URL", redis.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the example");
    let output = tokio::time::timeout(BOUND, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{lock_url}: the example did not finish within {BOUND:?}"))
        .expect("the example's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{lock_url}: {}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("late write refused"),
        "{lock_url}:\n{stdout}"
    );
    assert!(
        stdout.contains("stale writes refused 1"),
        "{lock_url}:\n{stdout}"
    );
}

#[tokio::test]
async fn the_fenced_redis_example_refuses_stale_writes_on_every_backend() {
    let redis = started(RedisServer::start()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    runs_fenced(&redis.url(), &redis).await;
    runs_fenced(&format!("file://{}", dir.path().display()), &redis).await;
    #[cfg(feature = "etcd")]
    {
        let etcd = started(lock_testkit::servers::EtcdCluster::start(1)).await;
        runs_fenced(&format!("etcd://{}", etcd.endpoints().join(",")), &redis).await;
    }
    #[cfg(feature = "zk")]
    {
        let zk = started(lock_testkit::servers::ZkEnsemble::start(1)).await;
        runs_fenced(&format!("zk://{}", zk.connect_string()), &redis).await;
    }
}
