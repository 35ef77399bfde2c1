//! What the etcd tests share: a real etcd per test, clients, and the
//! conformance target.

#![allow(dead_code, unreachable_pub)]

pub mod etcdctl;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{DynElectionBackend, DynLockBackend, LockGuard};
use lock_etcd::{EtcdBackend, EtcdConfig, KeyLayout, lease_of_key};
use lock_testkit::conformance::Target;
use lock_testkit::servers::EtcdCluster;

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
    async fn client(&self) -> Arc<DynLockBackend> {
        Arc::new(backend(&self.cluster).await)
    }

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
pub async fn txns_started(cluster: &lock_testkit::servers::EtcdCluster) -> f64 {
    cluster
        .member(0)
        .metric("grpc_server_started_total", &[r#"grpc_method="Txn""#])
        .await
        .expect("read etcd metrics")
}
