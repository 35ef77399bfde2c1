//! The conformance target on a real Redis Cluster, and cluster clients.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockGuard};
use distlock_redis::{RedisClusterBackend, RedisClusterConfig};
use distlock_testkit::conformance::Target;
use distlock_testkit::servers::{RedisCluster, RespReply};

/// Starts a cluster of `masters` masters with `replicas` replicas each.
pub async fn start_cluster(masters: usize, replicas: usize) -> RedisCluster {
    RedisCluster::start(masters, replicas)
        .await
        .unwrap_or_else(|e| panic!("cannot start a Redis Cluster: {e}"))
}

/// The config of a test client of `cluster`: every node a seed.
pub fn cluster_config_for(cluster: &RedisCluster) -> RedisClusterConfig {
    RedisClusterConfig::from_url(&cluster.url())
        .expect("the cluster's URL")
        .with_settings(&super::test_settings(std::time::Duration::from_secs(1)))
        .expect("the tests' settings")
}

/// A new, independent client of `cluster`.
pub async fn cluster_client(cluster: &RedisCluster) -> RedisClusterBackend {
    RedisClusterBackend::connect(cluster_config_for(cluster))
        .await
        .expect("connect to the redis cluster")
}

/// A cluster of three masters with a replica each, and two independent
/// clients of it.
pub async fn replicated_cluster_and_two_clients()
-> (RedisCluster, RedisClusterBackend, RedisClusterBackend) {
    let cluster = start_cluster(3, 1).await;
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    (cluster, a, b)
}

/// Deletes `key` on the master of its slot, as expiry would; it must have
/// been there.
pub async fn delete_on_its_master(cluster: &RedisCluster, key: &str) {
    let master = cluster.master_for_key(key).await.expect("master of key");
    let reply = master.command(&["DEL", key]).await.expect("DEL");
    assert_eq!(
        reply,
        RespReply::Integer(1),
        "{key} was not on its master {}",
        master.addr()
    );
}

/// A three-master cluster without replicas (a fresh one per test), each
/// client with its own connections.
pub struct ClusterTarget {
    cluster: RedisCluster,
}

impl ClusterTarget {
    /// Starts the cluster.
    pub async fn start() -> Self {
        ClusterTarget {
            cluster: start_cluster(3, 0).await,
        }
    }
}

#[async_trait]
impl Target for ClusterTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(cluster_client(&self.cluster).await)
    }

    fn ttl(&self) -> std::time::Duration {
        super::TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        delete_on_its_master(&self.cluster, guard.key()).await;
    }
}
