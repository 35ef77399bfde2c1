//! A Redis Cluster: masters with replicas, each node its own `redis-server
//! --cluster-enabled yes`, joined with `redis-cli --cluster create`.
//!
//! Nodes persist no data (`--save '' --appendonly no`) but keep their
//! cluster identity in `nodes.conf` in their directory, so a restarted node
//! rejoins as the same node (a restarted old master comes back as a replica
//! of whoever took its slots). Replication is asynchronous: a key written to
//! a master just before it dies may be missing on the replica that replaces
//! it.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use tempfile::TempDir;

use super::binary::Requirement;
use super::member::member_list;
use super::ports::free_port;
use super::process::{ChildProcess, process_controls, run_tool};
use super::readiness::wait_ready;
use super::redis::REDIS;
use super::workdir::temp_dir;
use super::{LaunchError, RespReply, resp};

/// How long a node may take to answer `CLUSTER MYID`, and the cluster to
/// become ok.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a failover may take; with a 1 s node timeout it takes 2–4 s.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// Short, so that tests see failures detected and failed over in seconds.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Every slot of a Redis Cluster.
const SLOTS: &str = "16384";
const REDIS_CLI: Requirement = Requirement {
    name: "redis-cli",
    package: "redis-tools",
};

/// How to launch a [`RedisCluster`]: start from
/// [`RedisClusterOptions::new`] and change the fields that matter.
#[derive(Debug, Clone)]
pub struct RedisClusterOptions {
    /// Masters; at least 3, as `redis-cli --cluster create` demands.
    pub masters: usize,
    /// Replicas of each master.
    pub replicas_per_master: usize,
    /// How long a node may be unreachable before it counts as failed
    /// (`--cluster-node-timeout`).
    pub node_timeout: Duration,
    /// A `redis-server` to run instead of the one on `PATH`.
    pub server_binary: Option<PathBuf>,
    /// A `redis-cli` to run instead of the one on `PATH`.
    pub cli_binary: Option<PathBuf>,
}

impl RedisClusterOptions {
    /// `masters` masters with `replicas_per_master` replicas each, a node
    /// timeout of 1 s, `redis-server` and `redis-cli` from `PATH`.
    pub fn new(masters: usize, replicas_per_master: usize) -> Self {
        Self {
            masters,
            replicas_per_master,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            server_binary: None,
            cli_binary: None,
        }
    }
}

/// One node of a [`RedisCluster`]; a master or a replica, which can change
/// with every failover.
#[derive(Debug)]
pub struct RedisClusterNode {
    port: u16,
    id: OnceLock<String>,
    // Declared before `_dir`, which is kept to be removed on drop: the
    // process dies before its directory goes.
    process: ChildProcess,
    _dir: TempDir,
}

process_controls!(RedisClusterNode);

impl RedisClusterNode {
    /// Prepares a node; nothing runs until [`RedisClusterNode::run`].
    fn new(binary: &Path, node_timeout: Duration) -> Result<Self, LaunchError> {
        let port = free_port();
        // Chosen too, rather than Redis's port + 10000, which may be taken.
        let bus_port = free_port();
        let label = format!("redis cluster node (127.0.0.1:{port})");
        let dir = temp_dir("distlock-redis-cluster-", &label)?;
        let (port_text, bus_text) = (port.to_string(), bus_port.to_string());
        let timeout_text = node_timeout.as_millis().to_string();
        let mut args: Vec<OsString> = [
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus_text,
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout_text,
            "--save",
            "",
            "--appendonly",
            "no",
            // A replica syncs at once instead of after the default 5 s wait
            // for more replicas.
            "--repl-diskless-sync-delay",
            "0",
            "--enable-debug-command",
            "local",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.extend(["--dir".into(), dir.path().as_os_str().to_owned()]);
        let process = ChildProcess::new(label, binary.to_owned(), args, dir.path(), "redis.log");
        Ok(Self {
            id: OnceLock::new(),
            port,
            process,
            _dir: dir,
        })
    }

    /// The node's cluster ID (`CLUSTER MYID`), kept across restarts.
    pub fn id(&self) -> &str {
        self.id.get().map_or("", String::as_str)
    }

    /// The address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends one command to this node on a fresh connection and returns the
    /// reply; a key of another node's slot comes back as a `MOVED` error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the connection is dropped; a command already sent may
    /// still run.
    pub async fn command(&self, args: &[&str]) -> io::Result<RespReply> {
        resp::command(&self.addr(), None, args).await
    }

    /// The node's log file (stdout and stderr, across restarts), next to
    /// its `nodes.conf`.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// Kills the node if it runs, starts it again on the same ports with its
    /// cluster identity (and an empty dataset), and waits until it answers
    /// `CLUSTER MYID`. [`RedisCluster::wait_ok`] waits until it has rejoined.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the node is left down, or started but perhaps not yet
    /// answering.
    pub async fn restart(&self) -> Result<(), LaunchError> {
        self.process.kill().await;
        self.run().await
    }

    /// Starts the process and waits until it answers `CLUSTER MYID`; a
    /// restarted node must answer with the ID it had, or it lost its
    /// `nodes.conf`.
    async fn run(&self) -> Result<(), LaunchError> {
        self.process.spawn()?;
        wait_ready(&self.process, READY_TIMEOUT, || async {
            let id = self.info(&["CLUSTER", "MYID"]).await?;
            match self.id.get() {
                Some(old) if *old != id => Err(format!("came back as {id}, was {old}")),
                _ => {
                    let _ = self.id.set(id);
                    Ok(())
                }
            }
        })
        .await
    }

    /// Whether the node can be asked anything: running and not paused.
    fn is_live(&self) -> bool {
        self.is_running() && !self.is_paused()
    }

    /// `Ok` once this node sees the cluster ok with every slot assigned and
    /// all `nodes` known, and, if it is a replica, its link to its master up.
    async fn cluster_ok(&self, nodes: usize) -> Result<(), String> {
        let info = self.info(&["CLUSTER", "INFO"]).await?;
        let expected = [
            ("cluster_state", "ok"),
            ("cluster_slots_assigned", SLOTS),
            ("cluster_known_nodes", &nodes.to_string()),
        ];
        for (name, want) in expected {
            let seen = field(&info, name);
            if seen != Some(want) {
                return Err(format!("{}: {name} is {seen:?}", self.addr()));
            }
        }
        let replication = self.info(&["INFO", "replication"]).await?;
        let link = field(&replication, "master_link_status");
        if field(&replication, "role") == Some("slave") && link != Some("up") {
            return Err(format!("{}: master_link_status is {link:?}", self.addr()));
        }
        Ok(())
    }

    /// The text of an `INFO`-style reply.
    async fn info(&self, args: &[&str]) -> Result<String, String> {
        match self.command(args).await {
            Ok(RespReply::Bulk(Some(text))) => Ok(text),
            Ok(other) => Err(format!("{}: {} answered {other:?}", self.addr(), args[0])),
            Err(err) => Err(format!("{}: {}: {err}", self.addr(), args.join(" "))),
        }
    }
}

/// A running Redis Cluster on loopback; dropping it kills every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisClusterNode>,
}

member_list!(RedisCluster, nodes: RedisClusterNode, nodes, node);

impl RedisCluster {
    /// Starts `masters` masters (at least 3) with `replicas_per_master`
    /// replicas each and waits until every node sees the cluster ok.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nodes started so far are killed when dropped.
    pub async fn start(masters: usize, replicas_per_master: usize) -> Result<Self, LaunchError> {
        Self::start_with(RedisClusterOptions::new(masters, replicas_per_master)).await
    }

    /// Starts a cluster as described by `options` and waits until every
    /// node sees it ok and every replica has synced with its master.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nodes started so far are killed when dropped.
    pub async fn start_with(options: RedisClusterOptions) -> Result<Self, LaunchError> {
        if options.masters < 3 {
            return Err(LaunchError::Io {
                what: "Redis Cluster".to_owned(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} masters asked for; a Redis Cluster needs at least 3",
                        options.masters
                    ),
                ),
            });
        }
        let server = REDIS.resolve(options.server_binary.as_deref())?;
        let cli = REDIS_CLI.resolve(options.cli_binary.as_deref())?;
        let count = options.masters * (1 + options.replicas_per_master);
        let nodes = (0..count)
            .map(|_| RedisClusterNode::new(&server, options.node_timeout))
            .collect::<Result<Vec<_>, _>>()?;
        try_join_all(nodes.iter().map(RedisClusterNode::run)).await?;
        create(cli, &nodes, options.replicas_per_master).await?;
        let cluster = Self { nodes };
        cluster.wait_ok().await?;
        Ok(cluster)
    }

    /// The addresses, `127.0.0.1:PORT`, of all nodes in start order.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(RedisClusterNode::addr).collect()
    }

    /// The cluster URL, `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`,
    /// listing every node.
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", self.addrs().join(","))
    }

    /// The nodes that are masters owning slots now, as a live node sees it,
    /// in start order.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn masters(&self) -> io::Result<Vec<&RedisClusterNode>> {
        let topology = self.topology().await?;
        Ok(self
            .nodes
            .iter()
            .filter(|node| {
                topology
                    .iter()
                    .any(|line| line.port == node.port && line.serves_slots())
            })
            .collect())
    }

    /// The replicas of `master` now, as a live node sees it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn replicas_of(
        &self,
        master: &RedisClusterNode,
    ) -> io::Result<Vec<&RedisClusterNode>> {
        let topology = self.topology().await?;
        Ok(self
            .nodes
            .iter()
            .filter(|node| {
                topology.iter().any(|line| {
                    line.port == node.port && line.master_id.as_deref() == Some(master.id())
                })
            })
            .collect())
    }

    /// The master that owns the slot of `key` now (`CLUSTER KEYSLOT`, then
    /// `CLUSTER NODES`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn master_for_key(&self, key: &str) -> io::Result<&RedisClusterNode> {
        let slot = match self
            .live_node()?
            .command(&["CLUSTER", "KEYSLOT", key])
            .await?
        {
            RespReply::Integer(slot) => slot,
            other => return Err(io::Error::other(format!("CLUSTER KEYSLOT: {other:?}"))),
        };
        let topology = self.topology().await?;
        let owner = topology
            .iter()
            .find(|line| line.serves_slots() && line.slots.iter().any(|r| r.contains(&slot)))
            .ok_or_else(|| io::Error::other(format!("no live master serves slot {slot}")))?;
        self.nodes
            .iter()
            .find(|node| node.port == owner.port)
            .ok_or_else(|| {
                io::Error::other(format!("slot {slot} is on unknown port {}", owner.port))
            })
    }

    /// Waits until every running, unpaused node sees the cluster ok, with
    /// every slot assigned and every replica synced. Use it after restarting
    /// a node.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_ok(&self) -> Result<(), LaunchError> {
        let total = self.nodes.len();
        let live = self.nodes.iter().filter(|node| node.is_live());
        try_join_all(
            live.map(|node| {
                wait_ready(&node.process, READY_TIMEOUT, move || node.cluster_ok(total))
            }),
        )
        .await?;
        let watcher = self.live_node().map_err(|source| LaunchError::Io {
            what: "Redis Cluster".to_owned(),
            source,
        })?;
        wait_ready(&watcher.process, READY_TIMEOUT, || {
            agreed(self.nodes.iter().filter(|node| node.is_live()))
        })
        .await
    }

    /// Waits until the slots of `old_master` (killed or paused just before)
    /// have moved to a replica of it and every other node sees the cluster
    /// ok again, and returns how long that took from this call. Fails after
    /// 20 s with what the cluster looked like last.
    ///
    /// Only a replica can take a dead master's slots, so "`old_master` owns
    /// no slots and every slot is assigned" means one was promoted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_failover(
        &self,
        old_master: &RedisClusterNode,
    ) -> Result<Duration, LaunchError> {
        let started = Instant::now();
        let others = || {
            self.nodes
                .iter()
                .filter(|node| node.is_live() && node.port != old_master.port)
        };
        let watcher = others().next().ok_or_else(|| LaunchError::Io {
            what: "Redis Cluster failover".to_owned(),
            source: io::Error::other("no other node is running to take over"),
        })?;
        wait_ready(&watcher.process, FAILOVER_TIMEOUT, || async {
            let topology = self.topology().await.map_err(|err| err.to_string())?;
            let old = topology.iter().find(|line| line.port == old_master.port);
            if old.is_some_and(|line| !line.slots.is_empty()) {
                return Err(format!("{} still owns its slots", old_master.addr()));
            }
            for node in others() {
                node.cluster_ok(self.nodes.len()).await?;
            }
            agreed(others()).await
        })
        .await?;
        Ok(started.elapsed())
    }

    fn live_node(&self) -> io::Result<&RedisClusterNode> {
        self.nodes
            .iter()
            .find(|node| node.is_live())
            .ok_or_else(|| io::Error::other("no Redis Cluster node is running"))
    }

    /// `CLUSTER NODES` as the first live node that answers sees it.
    async fn topology(&self) -> io::Result<Vec<NodeLine>> {
        let mut last = io::Error::other("no Redis Cluster node is running");
        for node in self.nodes.iter().filter(|node| node.is_live()) {
            match node.command(&["CLUSTER", "NODES"]).await {
                Ok(RespReply::Bulk(Some(text))) => return Ok(parse_nodes(&text)),
                Ok(other) => last = io::Error::other(format!("CLUSTER NODES: {other:?}")),
                Err(err) => last = err,
            }
        }
        Err(last)
    }
}

/// `Ok` once `nodes` all report the same roles and slots: a node that
/// says the cluster is ok may still hold a stale view (a restarted
/// master believes it owns its old slots until told otherwise).
async fn agreed<'a>(nodes: impl Iterator<Item = &'a RedisClusterNode>) -> Result<(), String> {
    let mut first: Option<(String, Vec<NodeLine>)> = None;
    for node in nodes {
        let mut view = parse_nodes(&node.info(&["CLUSTER", "NODES"]).await?);
        view.sort_by_key(|line| line.port);
        let Some((addr, seen)) = &first else {
            first = Some((node.addr(), view));
            continue;
        };
        if !seen
            .iter()
            .map(NodeLine::shape)
            .eq(view.iter().map(NodeLine::shape))
        {
            return Err(format!(
                "{addr} and {} disagree on roles or slots",
                node.addr()
            ));
        }
    }
    Ok(())
}

/// `redis-cli --cluster create`, off the runtime's threads: it blocks for
/// seconds while the nodes meet.
async fn create(
    cli: PathBuf,
    nodes: &[RedisClusterNode],
    replicas: usize,
) -> Result<(), LaunchError> {
    let mut command = Command::new(cli);
    command.args(["--cluster", "create"]);
    command.args(nodes.iter().map(RedisClusterNode::addr));
    command.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
    let what = format!("redis-cli --cluster create ({} nodes)", nodes.len());
    tokio::task::spawn_blocking(move || run_tool(command, what))
        .await
        .map_err(|err| LaunchError::Io {
            what: "redis-cli --cluster create".to_owned(),
            source: io::Error::other(err),
        })?
}

/// The value of `name:value` in an `INFO`-style text.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// One line of `CLUSTER NODES`: what a node believes about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeLine {
    port: u16,
    is_master: bool,
    /// `fail` or `fail?`: gossip state, which nodes learn at different times.
    failed: bool,
    master_id: Option<String>,
    slots: Vec<std::ops::RangeInclusive<i64>>,
}

impl NodeLine {
    /// A master that is not failed and owns slots.
    fn serves_slots(&self) -> bool {
        self.is_master && !self.failed && !self.slots.is_empty()
    }

    /// The roles and slots without the gossip state, for comparing views.
    fn shape(&self) -> (u16, bool, Option<&str>, &[std::ops::RangeInclusive<i64>]) {
        (
            self.port,
            self.is_master,
            self.master_id.as_deref(),
            &self.slots,
        )
    }
}

/// Parses `<id> <ip:port@bus[,host]> <flags> <master> <ping> <pong> <epoch>
/// <link> <slot>...`; slots in migration (`[...]`) are left out.
fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (addr, flags, master) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
            let endpoint = addr.split('@').next()?;
            let port = endpoint.rsplit(':').next()?.parse().ok()?;
            let slots = fields[8.min(fields.len())..]
                .iter()
                .filter_map(|slot| match slot.split_once('-') {
                    _ if slot.starts_with('[') => None,
                    Some((from, to)) => Some(from.parse().ok()?..=to.parse().ok()?),
                    None => slot.parse().ok().map(|one| one..=one),
                })
                .collect();
            let flag = |name: &str| flags.split(',').any(|f| f == name);
            Some(NodeLine {
                port,
                is_master: flag("master"),
                failed: flag("fail") || flag("fail?"),
                master_id: (*master != "-").then(|| (*master).to_owned()),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_masters_replicas_and_slots() {
        let text = "\
a1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 7000 [93->-b2]\n\
b2 127.0.0.1:30002@40002,host master,fail - 0 0 2 disconnected\n\
c3 127.0.0.1:30003@40003 slave a1 0 0 1 connected\n";
        let lines = parse_nodes(text);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].port, 30001);
        assert_eq!(lines[0].slots, vec![0..=5460, 7000..=7000]);
        assert!(lines[0].serves_slots());
        assert_eq!(lines[1].port, 30002);
        assert!(!lines[1].serves_slots());
        assert_eq!(lines[2].master_id.as_deref(), Some("a1"));
        assert!(lines[2].slots.is_empty());
    }

    #[test]
    fn reads_info_fields() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(field(info, "cluster_state"), Some("ok"));
        assert_eq!(field(info, "cluster_slots_assigned"), Some(SLOTS));
        assert_eq!(field(info, "cluster_known"), None);
    }
}
