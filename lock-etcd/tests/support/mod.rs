//! What the etcd tests share: a real etcd per test, clients, and the
//! conformance target.

#![allow(dead_code, unreachable_pub)]

pub mod etcdctl;

use distlock_etcd::ClientConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockBackendExt, LockGuard};
use distlock_etcd::{EtcdBackend, EtcdConfig, KeyLayout, lease_of_key};
use distlock_testkit::conformance::Target;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::EtcdCluster;
use etcd_client::{EventType, WatchOptions, WatchStream};

/// Lease TTL of the tests: etcd's minimum, to keep expiry tests short.
pub const TTL: Duration = Duration::from_secs(1);

/// Key prefix of the tests.
pub const PREFIX: &str = "/distlock-test";

/// Starts a cluster of `members`, failing with the launcher's message
/// (which names scripts/install-servers.sh when etcd is missing).
pub async fn start_cluster(members: usize) -> EtcdCluster {
    match EtcdCluster::start(members).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start a {members}-member etcd: {e}"),
    }
}

/// A test configuration for these endpoints.
pub fn config_for(endpoints: Vec<String>) -> EtcdConfig {
    EtcdConfig::new(endpoints)
        .with_prefix(PREFIX)
        .with_default_ttl(TTL)
        .with_connect_timeout(Duration::from_secs(5))
        .with_request_timeout(Duration::from_secs(2))
}

/// A test configuration in the `concurrency` layout (no key prefix).
pub fn concurrency_config_for(endpoints: Vec<String>) -> EtcdConfig {
    EtcdConfig::new(endpoints)
        .with_layout(KeyLayout::Concurrency)
        .with_default_ttl(TTL)
        .with_connect_timeout(Duration::from_secs(5))
        .with_request_timeout(Duration::from_secs(2))
}

/// A new, independent backend (its own connection) on `cluster`.
pub async fn backend(cluster: &EtcdCluster) -> EtcdBackend {
    EtcdBackend::connect(config_for(cluster.endpoints()))
        .await
        .expect("connect to the test etcd")
}

/// Two independent backends on `cluster`, as two processes would have.
pub async fn two_backends(cluster: &EtcdCluster) -> (EtcdBackend, EtcdBackend) {
    (backend(cluster).await, backend(cluster).await)
}

/// A fault proxy in front of member 0 of `cluster`, and a backend that
/// reaches etcd only through it, configured by `config` for the proxy's
/// endpoint.
pub async fn behind_proxy(
    cluster: &EtcdCluster,
    config: impl FnOnce(Vec<String>) -> EtcdConfig,
) -> (FaultProxy, EtcdBackend) {
    let upstream: SocketAddr = cluster.endpoints()[0].parse().unwrap();
    let proxy = FaultProxy::start(upstream).await.expect("proxy");
    let backend = EtcdBackend::connect(config(vec![proxy.addr().to_string()]))
        .await
        .expect("connect through the proxy");
    (proxy, backend)
}

/// The queue of semaphore or read-write lock `name` (`space` is
/// `semaphore` or `rwlock`), as the crate docs give it, for a name without
/// `/` or `%`.
pub fn shared_queue(space: &str, name: &str) -> String {
    format!("{PREFIX}/{space}/{name}/")
}

/// The queue directory (with its trailing `/`) that holder key `key` is in.
pub fn queue_of(key: &str) -> String {
    key.rsplit_once('/').unwrap().0.to_owned() + "/"
}

/// Watches every key of `queue`, from once the watch is confirmed.
pub async fn watch_queue(raw: &mut etcd_client::Client, queue: &str) -> WatchStream {
    let mut events = raw
        .watch(queue, Some(WatchOptions::new().with_prefix()))
        .await
        .expect("watch the queue");
    events.message().await.expect("created");
    events
}

/// A watch on a holder's queue, confirmed: the raw client it runs on, the
/// queue directory (with its trailing `/`) and its events.
pub struct QueueWatch {
    pub raw: etcd_client::Client,
    pub queue: String,
    pub events: WatchStream,
}

/// Watches the queue that holder key `key` is in, on a raw client of its own.
pub async fn watch_queue_of(cluster: &EtcdCluster, key: &str) -> QueueWatch {
    let queue = queue_of(key);
    let mut raw = raw_client(cluster).await;
    let events = watch_queue(&mut raw, &queue).await;
    QueueWatch { raw, queue, events }
}

/// A single-member etcd and the client holding a lock there.
pub struct Held {
    pub cluster: EtcdCluster,
    pub holder: EtcdBackend,
}

/// A single-member etcd where one client holds `name`: the etcd, a second
/// client to contend, and the holder's guard.
pub async fn contended(name: &str) -> (Held, EtcdBackend, LockGuard) {
    let cluster = start_cluster(1).await;
    let (holder, other) = two_backends(&cluster).await;
    let held = holder.lock(name).await.expect("lock");
    (Held { cluster, holder }, other, held)
}

/// The key of the next put `events` reports.
pub async fn next_put_key(events: &mut WatchStream) -> String {
    loop {
        let message = events.message().await.unwrap().unwrap();
        if let Some(put) = message
            .events()
            .iter()
            .find(|e| e.event_type() == EventType::Put)
        {
            return put.kv().unwrap().key_str().unwrap().to_owned();
        }
    }
}

/// The cluster's current revision, read through `raw`.
pub async fn revision(raw: &mut etcd_client::Client) -> i64 {
    let resp = raw.get("x", None).await.expect("read the revision");
    resp.header().expect("a response header").revision()
}

/// A raw etcd client, for acting on the server from outside the backend.
pub async fn raw_client(cluster: &EtcdCluster) -> etcd_client::Client {
    etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("raw etcd client")
}

/// Ends the lease behind `guard` from outside, as etcd would on expiry.
pub async fn revoke_lease_of(cluster: &EtcdCluster, key: &str) {
    let lease = lease_of_key(key).unwrap_or_else(|| panic!("no lease id in key {key}"));
    raw_client(cluster)
        .await
        .lease_revoke(lease)
        .await
        .expect("revoke the holder's lease");
}

/// One single-member etcd per test.
pub struct EtcdTarget {
    pub cluster: EtcdCluster,
}

pub async fn etcd_target() -> EtcdTarget {
    EtcdTarget {
        cluster: start_cluster(1).await,
    }
}

#[async_trait]
impl Target for EtcdTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(backend(&self.cluster).await)
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        revoke_lease_of(&self.cluster, guard.key()).await;
    }
}

/// Unary Txn requests member 0 has started so far, from its metrics.
pub async fn txns_started(cluster: &distlock_testkit::servers::EtcdCluster) -> f64 {
    cluster
        .member(0)
        .metric("grpc_server_started_total", &[r#"grpc_method="Txn""#])
        .await
        .expect("read etcd metrics")
}

/// The leader's index and one follower's, once `cluster` (of 3) has
/// elected a leader within `within`.
pub async fn leader_and_follower(cluster: &EtcdCluster, within: Duration) -> (usize, usize) {
    let leader = tokio::time::timeout(within, async {
        loop {
            if let Some(leader) = cluster.leader_index().await {
                return leader;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the cluster elects a leader");
    (leader, (leader + 1) % 3)
}

/// A raw client of member `index` only (no require-leader).
pub async fn client_of(cluster: &EtcdCluster, index: usize) -> etcd_client::Client {
    etcd_client::Client::connect([cluster.member(index).endpoint()], None)
        .await
        .expect("raw etcd client")
}
