//! `examples/fenced_redis.rs` and `examples/fenced_postgres.rs` on real
//! servers: the data lives in a real Redis or PostgreSQL, the lock comes
//! from each backend in turn, and each example must exit 0 (the stale write
//! refused, the counter exact).

mod support;

use std::time::Duration;

use distlock_testkit::assert::started;
use distlock_testkit::servers::{PostgresServer, RedisServer};
use support::{example_command, run_to_success};

/// One run: the stale worker's lease (1 s, or a ZooKeeper session) and a
/// dozen short turns, with room for a loaded machine.
const BOUND: Duration = Duration::from_secs(90);

/// Runs example `name` with the lock at `lock_url` and the data where
/// `data_var` (`REDIS_URL`, `DATABASE_URL`) says.
async fn runs_fenced(name: &str, lock_url: &str, data_var: &str, data_url: &str) {
    let command = example_command(name, &[("DISTLOCK_URL", lock_url), (data_var, data_url)]);
    let stdout = run_to_success(name, lock_url, command, BOUND).await;
    assert!(
        stdout.contains("refused"),
        "{name} on {lock_url}: no refused stale write\n{stdout}"
    );
    assert!(
        stdout.contains("stale writes refused 1"),
        "{name} on {lock_url}:\n{stdout}"
    );
}

/// The lock URLs of every backend, with the servers that keep them alive.
async fn lock_backends(
    postgres: &PostgresServer,
    redis: &RedisServer,
) -> Vec<(String, Box<dyn std::any::Any>)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backends: Vec<(String, Box<dyn std::any::Any>)> = vec![
        (redis.url(), Box::new(())),
        (postgres.url(), Box::new(())),
        (format!("file://{}", dir.path().display()), Box::new(dir)),
    ];
    #[cfg(feature = "etcd")]
    {
        let etcd = started(distlock_testkit::servers::EtcdCluster::start(1)).await;
        backends.push((
            format!("etcd://{}", etcd.endpoints().join(",")),
            Box::new(etcd),
        ));
    }
    #[cfg(feature = "zk")]
    {
        let zk = started(distlock_testkit::servers::ZkEnsemble::start(1)).await;
        backends.push((format!("zk://{}", zk.connect_string()), Box::new(zk)));
    }
    backends
}

#[tokio::test]
async fn the_fenced_redis_example_refuses_stale_writes_on_every_backend() {
    let redis = started(RedisServer::start()).await;
    let postgres = started(PostgresServer::start()).await;
    for (lock_url, _servers) in lock_backends(&postgres, &redis).await {
        runs_fenced("fenced_redis", &lock_url, "REDIS_URL", &redis.url()).await;
    }
}

#[tokio::test]
async fn the_fenced_postgres_example_refuses_stale_writes_on_every_backend() {
    let redis = started(RedisServer::start()).await;
    let postgres = started(PostgresServer::start()).await;
    for (lock_url, _servers) in lock_backends(&postgres, &redis).await {
        runs_fenced(
            "fenced_postgres",
            &lock_url,
            "DATABASE_URL",
            &postgres.url(),
        )
        .await;
    }
}
