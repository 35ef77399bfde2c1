//! etcd clusters (one member, or three for quorum tests).
//!
//! Members run with `--heartbeat-interval 10 --election-timeout 100`, so a
//! cluster forms in well under a second and elects a new leader quickly
//! after losing one. With that election timeout etcd's minimum lease TTL is
//! below one second, so leases of 1 s are honoured as asked.
//!
//! Options add etcd's authentication (a root user and users limited to a
//! key prefix, set up with `etcdctl` once the members are healthy), a
//! shorter simple-token TTL, and TLS on the client port with certificates
//! the test provides.
//!
//! With [`EtcdOptions::isolatable`] every member runs in a network namespace
//! of its own, so that [`EtcdCluster::isolate`] can cut one member off from
//! its peers while its clients still reach it (namespaces on a private
//! bridge for peer traffic, Unix sockets for clients): the
//! member keeps answering what it can answer alone (serializable reads of
//! what it had applied), and lags behind the others until
//! [`EtcdCluster::rejoin`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use tempfile::TempDir;

use super::LaunchError;
use super::binary::Requirement;
pub use super::etcd_auth::EtcdUser;
use super::etcd_auth::{AuthSetup, Etcdctl};
use super::http;
use super::member::member_list;
use super::netns::PeerNet;
use super::ports::free_port;
use super::process::{ChildProcess, process_controls};
use super::readiness::wait_ready;
use super::unix_relay::UnixRelay;
use super::workdir::temp_dir;

/// The members' default election timeout (`--election-timeout`).
const ELECTION_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a member may take to report healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one status request may take in [`EtcdCluster::leader_index`].
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);
const ETCD: Requirement = Requirement {
    name: "etcd",
    package: "etcd-server",
};
/// Inside a member's own namespace, where nothing else listens.
const NS_PEER_PORT: u16 = 2380;
/// The Unix sockets (in the member's directory) of an isolatable member's
/// client and metrics listeners; their `:port` is only part of the name.
const NS_CLIENT_SOCKET: &str = "client:2379";
const NS_METRICS_SOCKET: &str = "metrics:2381";

/// How to launch an [`EtcdCluster`].
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    members: usize,
    binary: Option<PathBuf>,
    auth: Option<AuthSetup>,
    auth_token_ttl: Option<Duration>,
    tls: Option<EtcdTls>,
    isolatable: bool,
    election_timeout: Duration,
}

/// TLS on the client port: the member serves `https` with this certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM certificate of the server (for `127.0.0.1`).
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
    /// PEM certificate of the CA that signed `cert` (what clients trust).
    pub ca: PathBuf,
    /// When set, clients must present a certificate signed by this CA
    /// (`--client-cert-auth`).
    pub client_ca: Option<PathBuf>,
}

impl EtcdOptions {
    /// A cluster of `members` members (1 or 3 are the usual sizes), using
    /// `etcd` from `PATH`.
    ///
    /// # Panics
    /// If `members` is zero.
    pub fn new(members: usize) -> Self {
        assert!(members > 0, "an etcd cluster needs at least one member");
        Self {
            members,
            binary: None,
            auth: None,
            auth_token_ttl: None,
            tls: None,
            isolatable: false,
            election_timeout: ELECTION_TIMEOUT,
        }
    }

    /// Runs every member in a network namespace of its own, for
    /// [`EtcdCluster::isolate`] and [`EtcdCluster::rejoin`]. Needs root and
    /// `ip` (iproute2); not combinable with [`EtcdOptions::tls`].
    ///
    /// Peers talk over a private bridge between the namespaces; clients
    /// still use `127.0.0.1:PORT`, relayed to a Unix socket of the member,
    /// so cutting peer traffic leaves client traffic alone. Members also
    /// run with `--pre-vote` (etcd 3.5's default): a member that rejoins
    /// does not depose a healthy leader with the terms it counted up alone.
    pub fn isolatable(mut self) -> Self {
        self.isolatable = true;
        self
    }

    /// Enables etcd's authentication once the cluster is up: a `root` user
    /// with `root_password` (and the root role), plus `users`, each limited
    /// to its key prefix.
    pub fn auth(mut self, root_password: impl Into<String>, users: Vec<EtcdUser>) -> Self {
        self.auth = Some(AuthSetup {
            root_password: root_password.into(),
            users,
        });
        self
    }

    /// How long a simple auth token lives without being used
    /// (`--auth-token-ttl`, whole seconds; etcd's default is 300 s).
    pub fn auth_token_ttl(mut self, ttl: Duration) -> Self {
        self.auth_token_ttl = Some(ttl);
        self
    }

    /// How long a follower goes without hearing its leader before it
    /// counts the leader gone (`--election-timeout`; the heartbeat is a
    /// tenth of it). The default, 100 ms, notices a lost leader at once; a
    /// longer one keeps a member cut off from its peers unaware of it, and
    /// answering its clients as before, for that long. The first election
    /// of a cluster also takes about this long.
    pub fn election_timeout(mut self, timeout: Duration) -> Self {
        self.election_timeout = timeout;
        self
    }

    /// Serves the client port with TLS. Health is then probed on a separate
    /// plain-HTTP metrics port, and [`EtcdCluster::leader_index`] finds no
    /// leader (its JSON gateway is behind TLS).
    pub fn tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Runs this `etcd` binary instead of the one on `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }
}

/// A running etcd cluster; dropping it kills every member and deletes their
/// data (and, if isolatable, their namespaces).
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    root_password: Option<String>,
    // Declared after `members`: the members die before their relays and
    // namespaces go.
    _relays: Vec<UnixRelay>,
    net: Option<PeerNet>,
}

impl EtcdCluster {
    /// Starts a cluster of `members` members and waits until every one
    /// reports healthy.
    ///
    /// # Panics
    /// If `members` is zero.
    pub async fn start(members: usize) -> Result<Self, LaunchError> {
        Self::start_with(EtcdOptions::new(members)).await
    }

    /// Starts a cluster as described by `options` and waits until every
    /// member reports healthy. All members start at once.
    pub async fn start_with(options: EtcdOptions) -> Result<Self, LaunchError> {
        assert!(
            !(options.isolatable && options.tls.is_some()),
            "EtcdOptions::isolatable() serves clients over plain HTTP; it does not combine with tls()"
        );
        let binary = ETCD.resolve(options.binary.as_deref())?;
        let net = if options.isolatable {
            Some(PeerNet::create(options.members)?)
        } else {
            None
        };
        let ports: Vec<(u16, u16, u16)> = (0..options.members)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let peer_urls: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, &(_, peer, _))| match net {
                Some(_) => format!("http://{}:{NS_PEER_PORT}", PeerNet::peer_ip(i)),
                None => format!("http://127.0.0.1:{peer}"),
            })
            .collect();
        let initial_cluster = peer_urls
            .iter()
            .enumerate()
            .map(|(i, url)| format!("{}={url}", member_name(i)))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("distlock-testkit-{}-{}", std::process::id(), ports[0].0);
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, &(client, _, metrics))| {
                let cluster = ClusterSpec {
                    binary: &binary,
                    initial_cluster: &initial_cluster,
                    token: &token,
                    auth_token_ttl: options.auth_token_ttl,
                    election_timeout: options.election_timeout,
                    tls: options.tls.as_ref(),
                    net: net.as_ref(),
                };
                EtcdMember::new(i, (client, metrics), &peer_urls[i], &cluster)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut relays = Vec::new();
        for member in &members {
            let ports = [member.client_port, member.metrics_port];
            for (&port, socket) in ports.iter().zip(&member.sockets) {
                let relay = UnixRelay::start(port, socket.clone()).await;
                relays.push(relay.map_err(|source| LaunchError::Io {
                    what: format!("relay 127.0.0.1:{port} to etcd member {}", member.name),
                    source,
                })?);
            }
        }
        for member in &members {
            member.process.spawn()?;
        }
        try_join_all(members.iter().map(EtcdMember::wait_ready)).await?;
        if let Some(auth) = &options.auth {
            let etcdctl = Etcdctl::new(
                None,
                members[0].client_url(),
                options.tls.as_ref().map(|t| t.ca.clone()),
            )?;
            let auth = auth.clone();
            tokio::task::spawn_blocking(move || etcdctl.enable_auth(&auth))
                .await
                .map_err(|e| LaunchError::Io {
                    what: "etcdctl (auth setup)".to_owned(),
                    source: std::io::Error::other(e.to_string()),
                })??;
        }
        Ok(Self {
            members,
            root_password: options.auth.map(|a| a.root_password),
            _relays: relays,
            net,
        })
    }

    /// Cuts member `index` off from its peers: its raft traffic, in both
    /// directions, is dropped without a reset, like a network partition.
    /// Its clients still reach it. Until it notices (an election timeout,
    /// 100 to 200 ms by default, see [`EtcdOptions::election_timeout`]) it
    /// still believes in its leader; then it keeps calling elections it
    /// cannot win. All along it serves serializable
    /// reads of what it had applied, while linearizable requests and
    /// writes sent to it get no answer, or `etcdserver: no leader` from
    /// clients that require a leader.
    ///
    /// # Panics
    /// If the cluster was not started
    /// [`isolatable`](EtcdOptions::isolatable), or `ip` fails.
    pub fn isolate(&self, index: usize) {
        self.on_net(index, "cut off", PeerNet::cut);
    }

    /// Ends [`EtcdCluster::isolate`]: member `index` reaches its peers
    /// again and catches up with the leader.
    ///
    /// # Panics
    /// If the cluster was not started
    /// [`isolatable`](EtcdOptions::isolatable), or `ip` fails.
    pub fn rejoin(&self, index: usize) {
        self.on_net(index, "reconnect", PeerNet::heal);
    }

    /// Runs `change` on member `index`'s peer links; panics naming what
    /// it was `doing` if that fails.
    fn on_net(
        &self,
        index: usize,
        doing: &str,
        change: fn(&PeerNet, usize) -> Result<(), LaunchError>,
    ) {
        assert!(index < self.members.len(), "no etcd member {index}");
        let net = self
            .net
            .as_ref()
            .expect("start the cluster with EtcdOptions::isolatable() to isolate a member");
        if let Err(e) = change(net, index) {
            panic!(
                "could not {doing} etcd member {}: {e}",
                self.members[index].name
            );
        }
    }

    /// The root user's password, when the cluster was started with auth.
    pub fn root_password(&self) -> Option<&str> {
        self.root_password.as_deref()
    }

    /// The client endpoints, `127.0.0.1:PORT`, one per member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::endpoint).collect()
    }

    /// The client URLs, `http://127.0.0.1:PORT`, one per member.
    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::client_url).collect()
    }

    /// The index of the member that currently considers itself leader, or
    /// `None` if no running, unpaused member does (e.g. mid-election).
    ///
    /// Asks each member's `/v3/maintenance/status` JSON gateway in turn.
    pub async fn leader_index(&self) -> Option<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if member.is_running() && !member.is_paused() && member.is_leader().await {
                return Some(index);
            }
        }
        None
    }
}

member_list!(EtcdCluster, members: EtcdMember, members, member);

/// What every member of one cluster shares.
struct ClusterSpec<'a> {
    binary: &'a Path,
    initial_cluster: &'a str,
    token: &'a str,
    auth_token_ttl: Option<Duration>,
    election_timeout: Duration,
    tls: Option<&'a EtcdTls>,
    /// The namespaces, when the cluster is isolatable.
    net: Option<&'a PeerNet>,
}

/// One etcd member process.
#[derive(Debug)]
pub struct EtcdMember {
    name: String,
    client_port: u16,
    peer_url: String,
    /// Plain-HTTP port for `/health` and `/metrics`.
    metrics_port: u16,
    tls: bool,
    /// The Unix sockets it listens on (when isolatable).
    sockets: Vec<PathBuf>,
    // Declared before `dir`: the process dies before its directory goes.
    process: ChildProcess,
    dir: TempDir,
}

process_controls!(EtcdMember);

impl EtcdMember {
    fn new(
        index: usize,
        (client_port, metrics_port): (u16, u16),
        peer_url: &str,
        cluster: &ClusterSpec<'_>,
    ) -> Result<Self, LaunchError> {
        let name = member_name(index);
        let label = format!("etcd member {name} (127.0.0.1:{client_port})");
        let dir = temp_dir("distlock-etcd-", &label)?;
        let scheme = if cluster.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let client_url = format!("{scheme}://127.0.0.1:{client_port}");
        // In a namespace of its own, the member listens on Unix sockets
        // that the cluster relays `127.0.0.1` ports to.
        let (listen_client_url, metrics_url) = match cluster.net {
            Some(_) => (
                format!("unix://{NS_CLIENT_SOCKET}"),
                format!("unix://{NS_METRICS_SOCKET}"),
            ),
            None => (
                client_url.clone(),
                format!("http://127.0.0.1:{metrics_port}"),
            ),
        };
        let sockets = match cluster.net {
            Some(_) => vec![
                dir.path().join(NS_CLIENT_SOCKET),
                dir.path().join(NS_METRICS_SOCKET),
            ],
            None => Vec::new(),
        };
        let data_dir = dir.path().join("data");
        let mut extra: Vec<OsString> = vec!["--listen-metrics-urls".into(), metrics_url.into()];
        if cluster.net.is_some() {
            extra.push("--pre-vote".into());
        }
        if let Some(ttl) = cluster.auth_token_ttl {
            extra.push(format!("--auth-token-ttl={}", ttl.as_secs().max(1)).into());
        }
        if let Some(tls) = cluster.tls {
            extra.push("--cert-file".into());
            extra.push(tls.cert.clone().into_os_string());
            extra.push("--key-file".into());
            extra.push(tls.key.clone().into_os_string());
            if let Some(client_ca) = &tls.client_ca {
                extra.push("--client-cert-auth".into());
                extra.push("--trusted-ca-file".into());
                extra.push(client_ca.clone().into_os_string());
            }
        }
        let election_ms = cluster.election_timeout.as_millis().max(10).to_string();
        let heartbeat_ms = (cluster.election_timeout.as_millis() / 10)
            .max(1)
            .to_string();
        let args: Vec<OsString> = [
            "--name",
            &name,
            "--listen-client-urls",
            &listen_client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            cluster.initial_cluster,
            "--initial-cluster-token",
            cluster.token,
            "--initial-cluster-state",
            "new",
            "--heartbeat-interval",
            &heartbeat_ms,
            "--election-timeout",
            &election_ms,
            "--logger",
            "zap",
            "--log-level",
            "warn",
            "--data-dir",
        ]
        .into_iter()
        .map(OsString::from)
        .chain([data_dir.into_os_string()])
        .chain(extra)
        .collect();
        // `ip netns exec` execs etcd: the child's pid is etcd's, so kill,
        // pause and resume act on etcd itself.
        let (program, args) = match cluster.net {
            Some(net) => (
                net.ip_binary().to_owned(),
                ["netns", "exec", net.namespace(index)]
                    .into_iter()
                    .map(OsString::from)
                    .chain([cluster.binary.as_os_str().to_owned()])
                    .chain(args)
                    .collect(),
            ),
            None => (cluster.binary.to_owned(), args),
        };
        let process = ChildProcess::new(label, program, args, dir.path(), "etcd.log");
        Ok(Self {
            name,
            client_port,
            peer_url: peer_url.to_owned(),
            metrics_port,
            tls: cluster.tls.is_some(),
            sockets,
            process,
            dir,
        })
    }

    /// The member name (`n1`, `n2`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client endpoint, `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The client URL, `http://127.0.0.1:PORT` (`https` under TLS).
    pub fn client_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The peer URL: `http://127.0.0.1:PORT`, or the member's address on
    /// the private peer segment when the cluster is isolatable.
    pub fn peer_url(&self) -> String {
        self.peer_url.clone()
    }

    /// The plain-HTTP endpoint serving `/health` and `/metrics`,
    /// `127.0.0.1:PORT` (also under TLS).
    pub fn metrics_endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.metrics_port)
    }

    /// The sum of every sample of the Prometheus metric `name` whose labels
    /// contain each of `labels` (e.g. `grpc_method="Txn"`), from
    /// `/metrics`.
    pub async fn metric(&self, name: &str, labels: &[&str]) -> Result<f64, String> {
        let response = http::request(&self.metrics_endpoint(), "GET", "/metrics", "")
            .await
            .map_err(|e| format!("GET /metrics: {e}"))?;
        let mut sum = 0.0;
        for line in response.body.lines() {
            let Some(rest) = line.strip_prefix(name) else {
                continue;
            };
            let Some((labels_part, value)) = rest.rsplit_once(' ') else {
                continue;
            };
            if !(labels_part.is_empty() || labels_part.starts_with('{')) {
                continue;
            }
            if labels.iter().all(|l| labels_part.contains(l)) {
                sum += value.parse::<f64>().map_err(|e| format!("{line}: {e}"))?;
            }
        }
        Ok(sum)
    }

    /// The member's temporary directory (data and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The member's log file (stdout and stderr, across restarts).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// Whether `GET /health` answers `"health":"true"` right now.
    pub async fn is_healthy(&self) -> bool {
        tokio::time::timeout(STATUS_TIMEOUT, self.health())
            .await
            .is_ok_and(|health| health.is_ok())
    }

    /// Whether this member considers itself the leader right now.
    pub async fn is_leader(&self) -> bool {
        tokio::time::timeout(STATUS_TIMEOUT, self.status())
            .await
            .ok()
            .flatten()
            .is_some_and(|(member_id, leader)| member_id == leader)
    }

    /// Kills the member if it runs, starts it again with the same ports and
    /// data directory, and waits until it reports healthy.
    pub async fn restart(&self) -> Result<(), LaunchError> {
        self.process.kill().await;
        // etcd does not replace a socket file left by a killed run.
        for socket in &self.sockets {
            match std::fs::remove_file(socket) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(LaunchError::Io {
                        what: format!("remove {}", socket.display()),
                        source: e,
                    });
                }
                _ => {}
            }
        }
        self.process.spawn()?;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<(), LaunchError> {
        wait_ready(&self.process, READY_TIMEOUT, || self.health()).await
    }

    async fn health(&self) -> Result<(), String> {
        let endpoint = format!("127.0.0.1:{}", self.metrics_port);
        match http::request(&endpoint, "GET", "/health", "").await {
            Ok(response)
                if response.status == 200 && response.body.contains(r#""health":"true""#) =>
            {
                Ok(())
            }
            Ok(response) => Err(format!(
                "GET /health: {} {}",
                response.status,
                response.body.trim()
            )),
            Err(err) => Err(format!("GET /health: {err}")),
        }
    }

    /// `(member_id, leader)` from the maintenance status JSON gateway.
    async fn status(&self) -> Option<(String, String)> {
        if self.tls {
            return None;
        }
        let response = http::request(&self.endpoint(), "POST", "/v3/maintenance/status", "{}")
            .await
            .ok()?;
        let json: serde_json::Value = serde_json::from_str(&response.body).ok()?;
        let member_id = json.pointer("/header/member_id")?.as_str()?.to_owned();
        let leader = json.get("leader")?.as_str()?.to_owned();
        Some((member_id, leader))
    }
}

fn member_name(index: usize) -> String {
    format!("n{}", index + 1)
}
