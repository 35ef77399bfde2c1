//! The rows of the matrix: which service, how to start it, and the URL a
//! client uses to reach it through its own fault proxies.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use futures::future::try_join_all;
use tempfile::TempDir;

use crate::proxy::FaultProxy;
use crate::servers::{
    EtcdCluster, EtcdOptions, LaunchError, RedisServer, RedisServers, ZkEnsemble, ZkOptions,
};

/// A backend configuration under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    /// etcd, one node.
    Etcd,
    /// etcd, three nodes.
    Etcd3,
    /// One Redis server without persistence.
    Redis,
    /// Redlock over three Redis servers.
    Redlock,
    /// ZooKeeper standalone.
    Zk,
    /// ZooKeeper, three-server ensemble.
    Zk3,
    /// The file backend on a local directory.
    File,
    /// A lock local to each client process (`memory://`): it excludes
    /// nobody across processes. The detector must fire on it.
    Broken,
}

impl Row {
    /// The seven real rows, in table order.
    pub const ALL: [Row; 7] = [
        Row::Etcd,
        Row::Etcd3,
        Row::Redis,
        Row::Redlock,
        Row::Zk,
        Row::Zk3,
        Row::File,
    ];

    /// The short name used by `--backends` and in the JSON.
    pub fn id(self) -> &'static str {
        match self {
            Row::Etcd => "etcd",
            Row::Etcd3 => "etcd-3",
            Row::Redis => "redis",
            Row::Redlock => "redlock",
            Row::Zk => "zk",
            Row::Zk3 => "zk-3",
            Row::File => "file",
            Row::Broken => "broken",
        }
    }

    /// What the row is, for the table.
    pub fn title(self) -> &'static str {
        match self {
            Row::Etcd => "etcd, 1 node",
            Row::Etcd3 => "etcd, 3 nodes",
            Row::Redis => "Redis, 1 server, no persistence",
            Row::Redlock => "Redlock, 3 servers",
            Row::Zk => "ZooKeeper standalone",
            Row::Zk3 => "ZooKeeper, 3 servers",
            Row::File => "file",
            Row::Broken => "broken (memory:// per process)",
        }
    }

    /// Parses a `--backends` entry.
    pub fn parse(text: &str) -> Option<Row> {
        Row::ALL
            .into_iter()
            .chain([Row::Broken])
            .find(|row| row.id() == text)
    }

    /// Whether its tokens are strong: strictly increasing across every
    /// fault the service itself survives (etcd revisions, ZooKeeper zxids
    /// and sequence numbers).
    pub fn strong_tokens(self) -> bool {
        matches!(self, Row::Etcd | Row::Etcd3 | Row::Zk | Row::Zk3)
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// The running service of a row; dropping it stops everything.
#[derive(Debug)]
pub enum Service {
    /// etcd members.
    Etcd(EtcdCluster),
    /// One Redis server.
    Redis(RedisServer),
    /// Independent Redis servers.
    Redlock(RedisServers),
    /// ZooKeeper servers.
    Zk(ZkEnsemble),
    /// The lock directory.
    File(TempDir),
    /// Nothing: every client's lock lives in its own memory.
    None,
}

impl Service {
    /// Starts the service of `row`. `isolatable` starts clusters so that a
    /// member can be cut off from its peers.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: servers started so far are killed when dropped.
    pub async fn start(row: Row, isolatable: bool) -> Result<Service, LaunchError> {
        Ok(match row {
            Row::Etcd | Row::Etcd3 => {
                let members = if row == Row::Etcd { 1 } else { 3 };
                let mut options = EtcdOptions::new(members);
                if isolatable && members > 1 {
                    options = options.isolatable();
                }
                Service::Etcd(EtcdCluster::start_with(options).await?)
            }
            Row::Redis => Service::Redis(RedisServer::start().await?),
            Row::Redlock => Service::Redlock(RedisServers::start(3).await?),
            Row::Zk | Row::Zk3 => {
                let members = if row == Row::Zk { 1 } else { 3 };
                let mut options = ZkOptions::new(members);
                if isolatable && members > 1 {
                    options = options.isolatable();
                }
                Service::Zk(ZkEnsemble::start_with(options).await?)
            }
            Row::File => Service::File(
                tempfile::Builder::new()
                    .prefix("distlock-fault-matrix-")
                    .tempdir()
                    .map_err(|source| LaunchError::Io {
                        what: "the file backend's lock directory".into(),
                        source,
                    })?,
            ),
            Row::Broken => Service::None,
        })
    }

    /// The client addresses of the servers, one per member.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        let texts = match self {
            Service::Etcd(cluster) => cluster.endpoints(),
            Service::Redis(server) => vec![server.addr()],
            Service::Redlock(servers) => servers.addrs(),
            Service::Zk(ensemble) => ensemble.addrs(),
            Service::File(_) | Service::None => Vec::new(),
        };
        texts
            .iter()
            .map(|t| t.parse().expect("launchers give ip:port addresses"))
            .collect()
    }

    /// How many servers the service has.
    pub fn members(&self) -> usize {
        self.addrs().len()
    }

    /// The URL of the service through `proxies` (one per member, in
    /// order), with the lease TTL.
    pub fn url(&self, proxies: &[&FaultProxy], ttl: Duration) -> String {
        let hosts = proxies
            .iter()
            .map(|p| p.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let ttl = format!("ttl={}ms", ttl.as_millis());
        match self {
            Service::Etcd(_) => format!("etcd://{hosts}/fault-matrix?{ttl}"),
            Service::Redis(_) => format!("redis://{hosts}?{ttl}"),
            Service::Redlock(_) => format!("redlock://{hosts}?{ttl}"),
            Service::Zk(_) => format!("zk://{hosts}/fault-matrix?{ttl}"),
            Service::File(dir) => format!("file://{}?{ttl}", dir.path().display()),
            Service::None => "memory://".to_owned(),
        }
    }

    /// Kills every server with `SIGKILL`. Redis loses its data; etcd and
    /// ZooKeeper keep theirs on disk.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the servers already killed stay down, the rest run.
    pub async fn kill_all(&self) {
        match self {
            Service::Etcd(cluster) => {
                for member in cluster.members() {
                    member.kill().await;
                }
            }
            Service::Redis(server) => server.kill().await,
            Service::Redlock(servers) => {
                for server in servers.servers() {
                    server.kill().await;
                }
            }
            Service::Zk(ensemble) => {
                for member in ensemble.members() {
                    member.kill().await;
                }
            }
            Service::File(_) | Service::None => {}
        }
    }

    /// Starts every server again on its ports and data directory, all at
    /// once (a cluster member waits for its quorum), and waits until they
    /// serve.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: servers started stay up; the others stay down.
    pub async fn restart_all(&self) -> Result<(), LaunchError> {
        match self {
            Service::Etcd(cluster) => {
                try_join_all(cluster.members().iter().map(|m| m.restart())).await?;
            }
            Service::Redis(server) => server.restart().await?,
            Service::Redlock(servers) => {
                try_join_all(servers.servers().iter().map(RedisServer::restart)).await?;
            }
            Service::Zk(ensemble) => {
                try_join_all(ensemble.members().iter().map(|m| m.restart())).await?;
            }
            Service::File(_) | Service::None => {}
        }
        Ok(())
    }
}
