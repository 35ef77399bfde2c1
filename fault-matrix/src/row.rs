//! The rows of the matrix: which service, how to start it, and the URL a
//! client uses to reach it through its own fault proxies.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use futures::future::try_join_all;
use tempfile::TempDir;

use super::mutant::Mutant;
use distlock_mysql::Layout as MysqlLayout;
use distlock_postgres::Layout;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::mariadb::{TEST_DATABASE, TEST_USER};
use distlock_testkit::servers::{
    EtcdCluster, EtcdOptions, LaunchError, MariadbServer, Member, PostgresServer, RedisCluster,
    RedisServer, RedisServers, ZkEnsemble, ZkOptions, temp_dir,
};

/// Masters of the Redis Cluster row: the fewest `redis-cli --cluster
/// create` accepts.
const CLUSTER_MASTERS: usize = 3;
/// Replicas per master of the Redis Cluster row: one, so that a killed
/// master has a replica to fail over to.
const CLUSTER_REPLICAS: usize = 1;

/// A backend configuration under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    /// etcd, one node.
    Etcd,
    /// etcd, three nodes.
    Etcd3,
    /// One Redis server without persistence.
    Redis,
    /// A Redis Cluster of 3 masters with 1 replica each, without
    /// persistence: fault 5 fails the lock's master over to its replica.
    RedisCluster,
    /// Redlock over three Redis servers.
    Redlock,
    /// ZooKeeper standalone.
    Zk,
    /// ZooKeeper, three-server ensemble.
    Zk3,
    /// One PostgreSQL server, the table layout.
    Postgres,
    /// One PostgreSQL server, the advisory layout: a lock is a session's
    /// `pg_advisory_lock`, so it ends with the session, not after a TTL.
    PostgresAdvisory,
    /// One MariaDB server through the MySQL backend, the table layout.
    Mysql,
    /// One MariaDB server through the MySQL backend, the named layout: a
    /// lock is a session's `GET_LOCK`, so it ends with the session, and
    /// its tokens are best effort (the server clock).
    MysqlNamed,
    /// The file backend on a local directory.
    File,
    /// A lock local to each client process (`memory://`): it excludes
    /// nobody across processes. The detector must fire on it.
    Broken,
    /// A real backend (file, Redis, or etcd built with a defect) wrapped in
    /// the client to break one promise; a verdict must catch it.
    Mutant(Mutant),
}

impl Row {
    /// The twelve real rows, in table order.
    pub const ALL: [Row; 12] = [
        Row::Etcd,
        Row::Etcd3,
        Row::Redis,
        Row::RedisCluster,
        Row::Redlock,
        Row::Zk,
        Row::Zk3,
        Row::Postgres,
        Row::PostgresAdvisory,
        Row::Mysql,
        Row::MysqlNamed,
        Row::File,
    ];

    /// The mutant rows, in table order.
    pub const MUTANTS: [Row; 4] = [
        Row::Mutant(Mutant::NoExclusion),
        Row::Mutant(Mutant::SilentLoss),
        Row::Mutant(Mutant::LongValidity),
        Row::Mutant(Mutant::UnconfirmedTurn),
    ];

    /// Every row `--backends` knows, in table order.
    pub fn every() -> impl Iterator<Item = Row> {
        Row::ALL
            .into_iter()
            .chain([Row::Broken])
            .chain(Row::MUTANTS)
    }

    /// The short name used by `--backends` and in the JSON.
    pub fn id(self) -> &'static str {
        match self {
            Row::Mutant(Mutant::NoExclusion) => "mutant-no-exclusion",
            Row::Mutant(Mutant::SilentLoss) => "mutant-silent-loss",
            Row::Mutant(Mutant::LongValidity) => "mutant-long-validity",
            Row::Mutant(Mutant::UnconfirmedTurn) => "mutant-unconfirmed-turn",
            Row::Etcd => "etcd",
            Row::Etcd3 => "etcd-3",
            Row::Redis => "redis",
            Row::RedisCluster => "redis-cluster",
            Row::Redlock => "redlock",
            Row::Zk => "zk",
            Row::Zk3 => "zk-3",
            Row::Postgres => "postgres",
            Row::PostgresAdvisory => "postgres-advisory",
            Row::Mysql => "mysql",
            Row::MysqlNamed => "mysql-named",
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
            Row::RedisCluster => "Redis Cluster, 3 masters with 1 replica each, no persistence",
            Row::Redlock => "Redlock, 3 servers",
            Row::Zk => "ZooKeeper standalone",
            Row::Zk3 => "ZooKeeper, 3 servers",
            Row::Postgres => "PostgreSQL, 1 server, table layout",
            Row::PostgresAdvisory => "PostgreSQL, 1 server, advisory layout",
            Row::Mysql => "MySQL backend on MariaDB, 1 server, table layout",
            Row::MysqlNamed => "MySQL backend on MariaDB, 1 server, named layout",
            Row::File => "file",
            Row::Broken => "broken (memory:// per process)",
            Row::Mutant(Mutant::NoExclusion) => {
                "file, tokens rise but every grant is given back at once"
            }
            Row::Mutant(Mutant::SilentLoss) => {
                "file, its lost signal never fires and is_held() stays true"
            }
            Row::Mutant(Mutant::LongValidity) => "Redis, validity one TTL longer than its lease",
            Row::Mutant(Mutant::UnconfirmedTurn) => {
                "etcd, 3 nodes, a waiter's turn confirmed by a member-local read"
            }
        }
    }

    /// Parses a `--backends` entry.
    pub fn parse(text: &str) -> Option<Row> {
        Row::every().find(|row| row.id() == text)
    }

    /// The backend a row runs on: a mutant's wrapped one, else itself.
    pub fn service_row(self) -> Row {
        match self {
            Row::Mutant(Mutant::NoExclusion | Mutant::SilentLoss) => Row::File,
            Row::Mutant(Mutant::LongValidity) => Row::Redis,
            Row::Mutant(Mutant::UnconfirmedTurn) => Row::Etcd3,
            other => other,
        }
    }

    /// The promise the row's clients break, if it is a mutant.
    pub fn mutant(self) -> Option<Mutant> {
        match self {
            Row::Mutant(m) => Some(m),
            _ => None,
        }
    }

    /// Whether the row is there to be caught (broken, mutants): its
    /// verdicts count as detections, not failures.
    pub fn must_be_caught(self) -> bool {
        matches!(self, Row::Broken | Row::Mutant(_))
    }

    /// How many servers the row runs: three in the clustered rows, six
    /// nodes in the Redis Cluster, else one (the file and broken rows start
    /// none).
    pub fn members(self) -> usize {
        match self.service_row() {
            Row::Etcd3 | Row::Redlock | Row::Zk3 => 3,
            Row::RedisCluster => CLUSTER_MASTERS * (1 + CLUSTER_REPLICAS),
            _ => 1,
        }
    }

    /// Whether its tokens are strong: strictly increasing across every
    /// fault the service itself survives (etcd revisions, ZooKeeper zxids
    /// and sequence numbers, a PostgreSQL sequence in either layout, a
    /// MySQL key's counter row).
    pub fn strong_tokens(self) -> bool {
        matches!(
            self,
            Row::Etcd
                | Row::Etcd3
                | Row::Zk
                | Row::Zk3
                | Row::Postgres
                | Row::PostgresAdvisory
                | Row::Mysql
        )
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
    /// A Redis Cluster; its clients reach the nodes directly.
    RedisCluster(RedisCluster),
    /// ZooKeeper servers.
    Zk(ZkEnsemble),
    /// One PostgreSQL server, and the layout its clients keep locks in.
    Postgres(PostgresServer, Layout),
    /// One MariaDB server, and the layout its clients keep locks in.
    Mysql(MariadbServer, MysqlLayout),
    /// The lock directory.
    File(TempDir),
    /// Nothing: every client's lock lives in its own memory.
    None,
}

/// How a row's servers are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Servers {
    /// Clusters are started so that a member can be cut off from its
    /// peers.
    pub isolatable: bool,
    /// etcd members' election timeout, when not the test kit's default.
    pub election_timeout: Option<Duration>,
}

impl Service {
    /// Starts the service of `row` as `servers` says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: servers started so far are killed when dropped.
    pub async fn start(row: Row, servers: Servers) -> Result<Service, LaunchError> {
        let row = row.service_row();
        let members = row.members();
        // One server has no peers to be cut off from.
        let isolatable = servers.isolatable && members > 1;
        Ok(match row {
            Row::Etcd | Row::Etcd3 => {
                let options = EtcdOptions::new(members);
                let options = when(isolatable, options, EtcdOptions::isolatable);
                let options = match servers.election_timeout {
                    Some(timeout) => options.election_timeout(timeout),
                    None => options,
                };
                Service::Etcd(EtcdCluster::start_with(options).await?)
            }
            Row::Redis => Service::Redis(RedisServer::start().await?),
            Row::Redlock => Service::Redlock(RedisServers::start(members).await?),
            Row::RedisCluster => {
                Service::RedisCluster(RedisCluster::start(CLUSTER_MASTERS, CLUSTER_REPLICAS).await?)
            }
            Row::Zk | Row::Zk3 => {
                let options = ZkOptions::new(members);
                let options = when(isolatable, options, ZkOptions::isolatable);
                Service::Zk(ZkEnsemble::start_with(options).await?)
            }
            Row::Postgres => Service::Postgres(PostgresServer::start().await?, Layout::Table),
            Row::PostgresAdvisory => {
                Service::Postgres(PostgresServer::start().await?, Layout::Advisory)
            }
            Row::Mysql => Service::Mysql(MariadbServer::start().await?, MysqlLayout::Table),
            Row::MysqlNamed => Service::Mysql(MariadbServer::start().await?, MysqlLayout::Named),
            Row::File => Service::File(temp_dir(
                "distlock-fault-matrix-",
                "the file backend's lock directory",
            )?),
            Row::Broken | Row::Mutant(_) => Service::None,
        })
    }

    /// The client addresses of the servers, one per member.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        let texts = match self {
            Service::Etcd(cluster) => cluster.endpoints(),
            Service::Redis(server) => vec![server.addr()],
            Service::Redlock(servers) => servers.addrs(),
            Service::RedisCluster(cluster) => cluster.addrs(),
            Service::Zk(ensemble) => ensemble.addrs(),
            Service::Postgres(server, _) => vec![server.addr()],
            Service::Mysql(server, _) => vec![server.addr()],
            Service::File(_) | Service::None => Vec::new(),
        };
        texts
            .iter()
            .map(|t| t.parse().expect("launchers give ip:port addresses"))
            .collect()
    }

    /// The addresses a client's fault proxies forward to: every server,
    /// except in a Redis Cluster, whose clients connect to the node
    /// addresses `CLUSTER SLOTS` announces and so would go past any proxy
    /// given as a seed. Faults that need a client's proxies do not apply
    /// there.
    pub fn proxied_addrs(&self) -> Vec<SocketAddr> {
        match self {
            Service::RedisCluster(_) => Vec::new(),
            _ => self.addrs(),
        }
    }

    /// How many servers the service has.
    pub fn members(&self) -> usize {
        self.addrs().len()
    }

    /// The URL of the service through `proxies` (one per address of
    /// [`proxied_addrs`](Self::proxied_addrs), in order), with the lease
    /// TTL.
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
            Service::RedisCluster(cluster) => format!("{}?{ttl}", cluster.url()),
            Service::Zk(_) => format!("zk://{hosts}/fault-matrix?{ttl}"),
            Service::Postgres(_, Layout::Advisory) => {
                format!("postgres://postgres@{hosts}/postgres?{ttl}&layout=advisory")
            }
            Service::Postgres(..) => format!("postgres://postgres@{hosts}/postgres?{ttl}"),
            Service::Mysql(server, layout) => {
                let named = if *layout == MysqlLayout::Named {
                    "&layout=named"
                } else {
                    ""
                };
                format!(
                    "mysql://{TEST_USER}:{}@{hosts}/{TEST_DATABASE}?{ttl}{named}",
                    server.password()
                )
            }
            Service::File(dir) => format!("file://{}?{ttl}", dir.path().display()),
            Service::None => "memory://".to_owned(),
        }
    }

    /// Every server, in start order, as [`Member`]s.
    fn all_members(&self) -> Vec<&dyn Member> {
        fn each<M: Member>(members: &[M]) -> Vec<&dyn Member> {
            members.iter().map(|m| m as &dyn Member).collect()
        }
        match self {
            Service::Etcd(cluster) => each(cluster.members()),
            Service::Redis(server) => vec![server],
            Service::Redlock(servers) => each(servers.servers()),
            Service::RedisCluster(cluster) => each(cluster.nodes()),
            Service::Zk(ensemble) => each(ensemble.members()),
            Service::Postgres(server, _) => vec![server],
            Service::Mysql(server, _) => vec![server],
            Service::File(_) | Service::None => Vec::new(),
        }
    }

    /// The server at `index`, if there is one.
    pub fn member(&self, index: usize) -> Option<&dyn Member> {
        self.all_members().get(index).copied()
    }

    /// How notes name the server at `index`.
    pub fn member_name(&self, index: usize) -> String {
        match self {
            Service::Etcd(_) => format!("etcd member {index}"),
            Service::Zk(_) => format!("ZooKeeper server {index}"),
            Service::RedisCluster(_) => format!("Redis Cluster node {index}"),
            Service::Postgres(..) => "the PostgreSQL server".to_owned(),
            Service::Mysql(..) => "the MariaDB server".to_owned(),
            _ => format!("Redis server {index} of {}", self.members()),
        }
    }

    /// Whether a killed server comes back without its data (Redis
    /// persists nothing here).
    pub fn restarts_empty(&self) -> bool {
        matches!(self, Service::Redis(_) | Service::Redlock(_))
    }

    /// The member that considers itself leader now, for etcd and
    /// ZooKeeper; `None` mid-election and for services without one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only asks.
    pub async fn leader_index(&self) -> Option<usize> {
        match self {
            Service::Etcd(cluster) => cluster.leader_index().await,
            Service::Zk(ensemble) => ensemble.leader_index().await,
            _ => None,
        }
    }

    /// Cuts member `index` off its peers (`cut`), or lets it rejoin them.
    /// Only etcd and ZooKeeper clusters started isolatable have peers to
    /// cut.
    pub fn isolate(&self, index: usize, cut: bool) -> Result<(), String> {
        match (self, cut) {
            (Service::Etcd(cluster), true) => cluster.isolate(index),
            (Service::Etcd(cluster), false) => cluster.rejoin(index),
            (Service::Zk(ensemble), true) => ensemble.isolate(index),
            (Service::Zk(ensemble), false) => ensemble.rejoin(index),
            (other, _) => return Err(format!("{other:?} has no peers to cut a member off")),
        }
        Ok(())
    }

    /// Kills every server with `SIGKILL`. Redis loses its data; etcd and
    /// ZooKeeper keep theirs on disk.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the servers already killed stay down, the rest run.
    pub async fn kill_all(&self) {
        for member in self.all_members() {
            member.kill().await;
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
        try_join_all(self.all_members().into_iter().map(Member::restart)).await?;
        Ok(())
    }
}

/// `options` with `change` applied if `yes`.
fn when<O>(yes: bool, options: O, change: fn(O) -> O) -> O {
    if yes { change(options) } else { options }
}
