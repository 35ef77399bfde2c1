//! Starts the test servers (etcd, Redis, ZooKeeper, PostgreSQL: one of
//! each, on free loopback ports with temporary data directories, configured
//! as the tests configure them), prints one `NAME URL` line per server, and
//! keeps them running until its standard input closes. `scripts/bench.sh`
//! runs the benchmarks against it.
//!
//! ```sh
//! cargo run -p distlock-testkit --example serve
//! ```

use std::io::{BufRead, Write};

use distlock_testkit::servers::{
    EtcdCluster, LaunchError, PostgresServer, RedisServer, ZkEnsemble,
};

#[tokio::main]
async fn main() -> Result<(), LaunchError> {
    let etcd = EtcdCluster::start(1).await?;
    let redis = RedisServer::start().await?;
    let zk = ZkEnsemble::start(1).await?;
    let postgres = PostgresServer::start().await?;
    let mut out = std::io::stdout().lock();
    let lines = [
        ("etcd", format!("etcd://{}", etcd.endpoints().join(","))),
        ("redis", redis.url()),
        ("zk", format!("zk://{}", zk.connect_string())),
        ("postgres", postgres.url()),
    ];
    for (name, url) in lines {
        writeln!(out, "{name} {url}").expect("stdout");
    }
    out.flush().expect("stdout");
    drop(out);
    // Until stdin closes: the servers go with this process.
    tokio::task::spawn_blocking(|| for _ in std::io::stdin().lock().lines() {})
        .await
        .expect("stdin reader");
    Ok(())
}
