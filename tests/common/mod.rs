//! Shared by the root integration tests: running the `distlock` binary and
//! starting the backends under test on real servers.
//!
//! A server binary that is missing makes the test fail with a message that
//! names `scripts/install-servers.sh` (from lock-testkit's launchers); nothing
//! is skipped.

#![allow(dead_code, unreachable_pub)]

use std::any::Any;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::process::Command;

/// The `distlock` binary built for these tests.
pub const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

/// A backend under test: its URL, and whatever keeps its servers alive.
pub struct Fixture {
    pub url: String,
    _keep: Box<dyn Any + Send + Sync>,
}

impl Fixture {
    pub fn new(url: String, keep: impl Any + Send + Sync) -> Self {
        Fixture {
            url,
            _keep: Box::new(keep),
        }
    }
}

/// A fresh lock directory for the file backend.
pub fn file_fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("file://{}", dir.path().display());
    Fixture::new(url, dir)
}

#[cfg(feature = "etcd")]
pub async fn etcd_fixture() -> Fixture {
    let cluster = lock_testkit::assert::started(lock_testkit::servers::EtcdCluster::start(1)).await;
    Fixture::new(format!("etcd://{}", cluster.endpoints().join(",")), cluster)
}

#[cfg(feature = "redis")]
pub async fn redis_fixture() -> Fixture {
    let server = lock_testkit::assert::started(lock_testkit::servers::RedisServer::start()).await;
    Fixture::new(server.url(), server)
}

#[cfg(feature = "redis")]
pub async fn redlock_fixture() -> Fixture {
    let servers =
        lock_testkit::assert::started(lock_testkit::servers::RedisServers::start(3)).await;
    Fixture::new(format!("redlock://{}", servers.addrs().join(",")), servers)
}

#[cfg(feature = "zk")]
pub async fn zk_fixture() -> Fixture {
    let ensemble = lock_testkit::assert::started(lock_testkit::servers::ZkEnsemble::start(1)).await;
    Fixture::new(format!("zk://{}", ensemble.connect_string()), ensemble)
}

/// A `distlock` command with a clean environment (no `DISTLOCK_*` from the
/// developer's shell) and the given URL.
pub fn distlock(url: Option<&str>) -> Command {
    let mut cmd = Command::new(DISTLOCK);
    for var in distlock::ENV_VARS
        .iter()
        .chain(["DISTLOCK_CONFIG", "DISTLOCK_LOG"].iter())
    {
        cmd.env_remove(var);
    }
    if let Some(url) = url {
        cmd.arg("--url").arg(url);
    }
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// Runs `cmd` to completion, failing the test if it takes longer than `bound`.
pub async fn output_within(bound: Duration, cmd: &mut Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn distlock");
    match tokio::time::timeout(bound, child.wait_with_output()).await {
        Ok(output) => output.expect("wait for distlock"),
        Err(_) => panic!("distlock did not finish within {bound:?}: {cmd:?}"),
    }
}

/// Stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Waits until `path` exists, failing after `bound`.
pub async fn wait_for_file(path: &Path, bound: Duration) {
    let start = tokio::time::Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < bound,
            "{} did not appear within {bound:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
