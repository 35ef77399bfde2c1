//! Uncontended overhead: one client's `lock` + `release` of a free lock
//! against the raw round trips of the same requests, issued with
//! `zookeeper-client` directly, on the same standalone ZooKeeper in the
//! same run.
//!
//! Our acquire of a free lock is a `create` of an ephemeral-sequential node
//! `{dir}/_c_{guid}-lock-` pipelined with a `getChildren` of `{dir}` (one
//! round trip), and our release a `delete` of that node. The per-name
//! directory is a container node, created when a `create` finds it missing.
//! The session's periodic `sync` (every sixteenth of the session timeout)
//! and the watch on a held node (armed 100 ms after the grant) are not per
//! cycle: neither happens in a cycle with no hold time. The raw loop sends
//! the same `create` + `getChildren` and `delete` on its own session.
//!
//! Run: `cargo bench -p distlock-zk --bench overhead` (`BENCH_ROUNDS`, default
//! 8, alternating rounds; `BENCH_SECS`, default 1, seconds per side per
//! round).

use distlock_zk::ClientConfig;
use std::time::Duration;

use async_trait::async_trait;
use distlock_testkit::overhead::{Cycle, Ours, Rounds, compare, print};
use distlock_testkit::servers::ZkEnsemble;
use distlock_zk::{ZkBackend, ZkConfig, zk};
use tokio::time::timeout;

const NAME: &str = "overhead";
const SESSION: Duration = Duration::from_secs(10);
/// `ZkConfig`'s default request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The requests of an uncontended cycle on a bare session.
struct Raw {
    client: zk::Client,
    dir: String,
    data: Vec<u8>,
    /// Our node once created.
    path: String,
}

async fn bounded<T>(request: impl Future<Output = Result<T, zk::Error>>) -> Result<T, zk::Error> {
    timeout(REQUEST_TIMEOUT, request)
        .await
        .unwrap_or(Err(zk::Error::Timeout))
}

/// The sequence number at the end of a sequential node's name.
fn sequence(child: &str) -> &str {
    &child[child.len().saturating_sub(10)..]
}

impl Raw {
    async fn connect(servers: &str) -> Raw {
        let client = zk::Client::connector()
            .with_session_timeout(SESSION)
            .with_connection_timeout(SESSION / 4)
            .connect(servers)
            .await
            .expect("connect");
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        bounded(client.mkdir("/bench-raw/locks", &persistent))
            .await
            .expect("mkdir");
        Raw {
            client,
            dir: format!("/bench-raw/locks/{NAME}"),
            data: distlock_core::default_holder_description().into_bytes(),
            path: String::new(),
        }
    }
}

#[async_trait]
impl Cycle for Raw {
    async fn acquire(&mut self) -> Result<(), String> {
        let prefix = format!("{}/_c_{}-lock-", self.dir, uuid::Uuid::new_v4());
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (created, children) = loop {
            let create = self.client.create(&prefix, &self.data, &options);
            let children = self.client.list_children(&self.dir);
            match bounded(create).await {
                Err(zk::Error::NoNode) => {
                    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
                    match bounded(self.client.create(&self.dir, &[], &container)).await {
                        Ok(_) | Err(zk::Error::NodeExists) => continue,
                        Err(e) => return Err(e.to_string()),
                    }
                }
                created => break (created, children),
            }
        };
        let (_, seq) = created.map_err(|e| e.to_string())?;
        self.path = format!("{prefix}{seq}");
        let children = bounded(children).await.map_err(|e| e.to_string())?;
        let ours = sequence(&self.path);
        if children.iter().any(|child| sequence(child) < ours) {
            return Err("the lock was not free".to_owned());
        }
        Ok(())
    }

    async fn release(&mut self) -> Result<(), String> {
        bounded(self.client.delete(&self.path, None))
            .await
            .map_err(|e| e.to_string())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = Rounds::from_env();
    let server = ZkEnsemble::start(1)
        .await
        .unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let servers = server.connect_string();
    let config = ZkConfig::new([servers.clone()])
        .with_prefix("/bench-ours")
        .with_session_timeout(SESSION);
    let backend = ZkBackend::connect(config).await.expect("connect");
    let mut ours = Ours::new(backend, NAME);
    let mut raw = Raw::connect(&servers).await;
    println!(
        "# distlock-zk: uncontended lock + release against the raw requests\n\n\
         ZooKeeper at {servers}; 1 client, hold 0, {} alternating rounds of {:?} per side\n",
        rounds.rounds, rounds.each
    );
    // Warm up the JVM before the measured rounds.
    let warm_up = Rounds {
        rounds: 2,
        each: Duration::from_secs(1),
    };
    compare(&mut ours, &mut raw, warm_up).await;
    let (o, r) = compare(&mut ours, &mut raw, rounds).await;
    print(
        [
            "distlock zk (lock + release)",
            "raw zookeeper-client (create + getChildren, delete)",
        ],
        [&o, &r],
    );
}
