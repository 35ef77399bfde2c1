//! Backends under test as URLs: each fixture starts its real servers (or
//! makes a temporary lock directory) and keeps them alive for as long as the
//! fixture lives. Tests that drive distlock through a URL, such as the
//! facade's and the CLI's, share these.

use std::any::Any;

use crate::assert::started;
use crate::servers::{EtcdCluster, PostgresServer, RedisServer, RedisServers, ZkEnsemble};

/// A backend under test: its URL, and whatever keeps its servers alive.
pub struct Fixture {
    /// The URL that reaches the backend.
    pub url: String,
    _keep: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture").field("url", &self.url).finish()
    }
}

impl Fixture {
    /// A fixture for `url` that keeps `keep` (servers, a directory) alive.
    pub fn new(url: String, keep: impl Any + Send + Sync) -> Self {
        Fixture {
            url,
            _keep: Box::new(keep),
        }
    }
}

/// A fresh lock directory for the file backend.
pub fn file() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("file://{}", dir.path().display());
    Fixture::new(url, dir)
}

/// A one-member etcd cluster.
pub async fn etcd() -> Fixture {
    let cluster = started(EtcdCluster::start(1)).await;
    Fixture::new(format!("etcd://{}", cluster.endpoints().join(",")), cluster)
}

/// One Redis server.
pub async fn redis() -> Fixture {
    let server = started(RedisServer::start()).await;
    Fixture::new(server.url(), server)
}

/// Three independent Redis servers for Redlock.
pub async fn redlock() -> Fixture {
    let servers = started(RedisServers::start(3)).await;
    Fixture::new(format!("redlock://{}", servers.addrs().join(",")), servers)
}

/// A one-server ZooKeeper ensemble.
pub async fn zk() -> Fixture {
    let ensemble = started(ZkEnsemble::start(1)).await;
    Fixture::new(format!("zk://{}", ensemble.connect_string()), ensemble)
}

/// A PostgreSQL server, with the default table layout.
pub async fn postgres() -> Fixture {
    let server = started(PostgresServer::start()).await;
    Fixture::new(server.url(), server)
}
