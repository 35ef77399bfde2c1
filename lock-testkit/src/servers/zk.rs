//! ZooKeeper: a standalone server or a three-server ensemble.
//!
//! Servers run Debian's ZooKeeper jar directly on the JVM
//! (`QuorumPeerMain zoo.cfg`); the jar's manifest pulls in its dependencies
//! from `/usr/share/java`, and `slf4j-log4j12.jar` plus `log4j-1.2.jar` make
//! it log (at INFO, to the member's log file).
//!
//! `tickTime` is 100 ms, so sessions can be as short as 200 ms
//! (`minSessionTimeout=200`, `maxSessionTimeout=60000`; see
//! [`ZkOptions::session_timeouts`] for another range). Followers notice a
//! dead or frozen leader after `syncLimit` ticks (1 s; see
//! [`ZkOptions::sync_limit`]). Transaction logs are not fsynced
//! (`forceSync=no`): a `SIGKILL` loses nothing, only a machine crash would.
//! With [`ZkOptions::isolatable`] every link between two servers runs
//! through a [`FaultProxy`], so that one server can be cut off from the
//! others while its clients still reach it.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::LaunchError;
use super::binary::Requirement;
use super::member::member_list;
use super::ports::free_port;
use super::process::{ChildProcess, process_controls};
use super::readiness::wait_ready;
use super::workdir::temp_dir;
use crate::proxy::FaultProxy;

/// How long every member of an ensemble may take to serve.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one four-letter command may take in status queries.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);
/// Where Debian installs ZooKeeper and its dependencies.
const DEFAULT_JAR_DIR: &str = "/usr/share/java";
/// Jars that make ZooKeeper log; used when present.
const LOGGING_JARS: [&str; 2] = ["slf4j-log4j12.jar", "log4j-1.2.jar"];
const JAVA: Requirement = Requirement {
    name: "java",
    package: "default-jre-headless",
};
const ZOOKEEPER_JAR: Requirement = Requirement {
    name: "ZooKeeper (zookeeper.jar)",
    package: "zookeeper",
};
/// Small heap, fast startup: three JVMs share two cores in tests.
const JVM_FLAGS: [&str; 6] = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
];
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
const LOG4J_PROPERTIES: &str = "\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Target=System.out
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] - %-5p [%t:%C{1}@%L] - %m%n
";

/// The session timeouts a server grants by default: `minSessionTimeout`
/// and `maxSessionTimeout` (two and 600 ticks of 100 ms).
const SESSION_TIMEOUTS: (Duration, Duration) =
    (Duration::from_millis(200), Duration::from_secs(60));

/// How to launch a [`ZkEnsemble`].
#[derive(Debug, Clone)]
pub struct ZkOptions {
    members: usize,
    java: Option<PathBuf>,
    jar_dir: Option<PathBuf>,
    session_timeouts: (Duration, Duration),
    sync_limit: u32,
    isolatable: bool,
}

impl ZkOptions {
    /// An ensemble of `members` servers (1 runs standalone; 3 is the usual
    /// quorum size), using `java` from `PATH` and jars from
    /// `/usr/share/java`.
    ///
    /// # Panics
    /// If `members` is zero.
    pub fn new(members: usize) -> Self {
        assert!(
            members > 0,
            "a ZooKeeper ensemble needs at least one server"
        );
        Self {
            members,
            java: None,
            jar_dir: None,
            session_timeouts: SESSION_TIMEOUTS,
            sync_limit: 10,
            isolatable: false,
        }
    }

    /// How many ticks of 100 ms a follower may go without hearing from the
    /// leader (and the leader from a follower) before giving up on it
    /// (`syncLimit`, default 10). While a follower cut off from the leader
    /// has not given up, it keeps serving its clients.
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks;
        self
    }

    /// Routes every quorum and election link between two servers through a
    /// fault proxy of its own, for [`ZkEnsemble::isolate`]. Client
    /// connections are not affected.
    pub fn isolatable(mut self) -> Self {
        self.isolatable = true;
        self
    }

    /// Grants session timeouts only in `min..=max` (`minSessionTimeout`,
    /// `maxSessionTimeout`; whole milliseconds, `min` at least 200 ms, two
    /// ticks). The server clamps a requested timeout into this range.
    pub fn session_timeouts(mut self, min: Duration, max: Duration) -> Self {
        self.session_timeouts = (min, max);
        self
    }

    /// Runs this `java` binary instead of the one on `PATH`.
    pub fn java(mut self, path: impl Into<PathBuf>) -> Self {
        self.java = Some(path.into());
        self
    }

    /// Looks for `zookeeper.jar` and the logging jars in this directory
    /// instead of `/usr/share/java`.
    pub fn jar_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.jar_dir = Some(dir.into());
        self
    }
}

/// A running ZooKeeper ensemble; dropping it kills every server and deletes
/// their data.
#[derive(Debug)]
pub struct ZkEnsemble {
    members: Vec<ZkMember>,
    /// The proxied links between servers (empty unless isolatable).
    links: Vec<PeerLink>,
}

/// The quorum and election ports of server `to` as server `from` reaches
/// them.
#[derive(Debug)]
struct PeerLink {
    from: usize,
    to: usize,
    peer: FaultProxy,
    election: FaultProxy,
}

impl ZkEnsemble {
    /// Starts `members` servers and waits until every one serves (its `srvr`
    /// output shows a `Mode:`).
    ///
    /// # Panics
    /// If `members` is zero.
    pub async fn start(members: usize) -> Result<Self, LaunchError> {
        Self::start_with(ZkOptions::new(members)).await
    }

    /// Starts an ensemble as described by `options`; all servers start at
    /// once.
    pub async fn start_with(options: ZkOptions) -> Result<Self, LaunchError> {
        let java = JAVA.resolve(options.java.as_deref())?;
        let classpath = classpath(
            options
                .jar_dir
                .as_deref()
                .unwrap_or(Path::new(DEFAULT_JAR_DIR)),
        )?;
        let ports: Vec<MemberPorts> = (0..options.members)
            .map(|_| MemberPorts {
                client: free_port(),
                peer: free_port(),
                election: free_port(),
            })
            .collect();
        let links = if options.isolatable && ports.len() > 1 {
            peer_links(&ports).await?
        } else {
            Vec::new()
        };
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, &own)| {
                let servers = server_lines(i, &ports, &links);
                let config = MemberConfig {
                    id: i + 1,
                    ports: own,
                    servers: &servers,
                    session_timeouts: options.session_timeouts,
                    sync_limit: options.sync_limit,
                };
                ZkMember::new(&config, &java, &classpath)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for member in &members {
            member.process.spawn()?;
        }
        try_join_all(members.iter().map(ZkMember::wait_ready)).await?;
        Ok(Self { members, links })
    }

    /// Cuts server `index` off from every other server, as a network
    /// partition would: its quorum and election links stop carrying bytes
    /// (they are blackholed, not reset, so nobody notices before the
    /// `syncLimit`), while its clients still reach it.
    ///
    /// # Panics
    /// If the ensemble was not started [`isolatable`](ZkOptions::isolatable).
    pub fn isolate(&self, index: usize) {
        for link in self.links_of(index) {
            link.peer.blackhole();
            link.election.blackhole();
        }
    }

    /// Ends [`ZkEnsemble::isolate`]: server `index` reaches the others again.
    ///
    /// # Panics
    /// If the ensemble was not started [`isolatable`](ZkOptions::isolatable).
    pub fn rejoin(&self, index: usize) {
        for link in self.links_of(index) {
            link.peer.restore();
            link.election.restore();
        }
    }

    /// The fault proxy that carries server `from`'s quorum connection to
    /// server `to` (a follower reaches the leader through the one from it to
    /// the leader), to slow down or cut that one link.
    ///
    /// # Panics
    /// If the ensemble was not started [`isolatable`](ZkOptions::isolatable),
    /// or `from == to`.
    pub fn quorum_link(&self, from: usize, to: usize) -> &FaultProxy {
        assert!(
            !self.links.is_empty(),
            "start the ensemble with ZkOptions::isolatable() to reach its links"
        );
        &self
            .links
            .iter()
            .find(|link| link.from == from && link.to == to)
            .unwrap_or_else(|| panic!("no quorum link from server {from} to server {to}"))
            .peer
    }

    fn links_of(&self, index: usize) -> impl Iterator<Item = &PeerLink> {
        assert!(
            !self.links.is_empty(),
            "start the ensemble with ZkOptions::isolatable() to isolate a server"
        );
        self.links
            .iter()
            .filter(move |link| link.from == index || link.to == index)
    }

    /// The client addresses, `127.0.0.1:PORT`, one per server.
    pub fn addrs(&self) -> Vec<String> {
        self.members.iter().map(ZkMember::addr).collect()
    }

    /// The connect string, `127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn connect_string(&self) -> String {
        self.addrs().join(",")
    }

    /// The index of the server whose `srvr` mode is `leader` (a standalone
    /// server counts as leader), or `None` if no running, unpaused server
    /// says so (e.g. mid-election).
    pub async fn leader_index(&self) -> Option<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if !member.is_running() || member.is_paused() {
                continue;
            }
            if matches!(
                member.mode().await.as_deref(),
                Some("leader" | "standalone")
            ) {
                return Some(index);
            }
        }
        None
    }
}

// Server `index` has `myid` `index + 1`.
member_list!(ZkEnsemble, members: ZkMember, members, member);

/// A proxy for every server's quorum and election port, per server that
/// connects to it.
async fn peer_links(ports: &[MemberPorts]) -> Result<Vec<PeerLink>, LaunchError> {
    let proxy = async |port: u16| {
        FaultProxy::start(([127, 0, 0, 1], port).into())
            .await
            .map_err(|source| LaunchError::Io {
                what: format!("a fault proxy for ZooKeeper peer port {port}"),
                source,
            })
    };
    let mut links = Vec::new();
    for from in 0..ports.len() {
        for (to, target) in ports.iter().enumerate().filter(|(to, _)| *to != from) {
            links.push(PeerLink {
                from,
                to,
                peer: proxy(target.peer).await?,
                election: proxy(target.election).await?,
            });
        }
    }
    Ok(links)
}

/// The `server.N=` lines of server `index`: its own ports as they are, the
/// others' through its proxies (if any). Empty for a standalone server.
fn server_lines(index: usize, ports: &[MemberPorts], links: &[PeerLink]) -> String {
    if ports.len() < 2 {
        return String::new();
    }
    ports
        .iter()
        .enumerate()
        .map(|(to, own)| {
            let link = links.iter().find(|l| l.from == index && l.to == to);
            let (peer, election) = match link {
                Some(link) => (link.peer.addr().port(), link.election.addr().port()),
                None => (own.peer, own.election),
            };
            format!("server.{}=127.0.0.1:{peer}:{election}\n", to + 1)
        })
        .collect()
}

/// What one member's `zoo.cfg` says.
struct MemberConfig<'a> {
    id: usize,
    ports: MemberPorts,
    /// The `server.N=` lines; empty for a standalone server.
    servers: &'a str,
    session_timeouts: (Duration, Duration),
    sync_limit: u32,
}

#[derive(Debug, Clone, Copy)]
struct MemberPorts {
    client: u16,
    peer: u16,
    election: u16,
}

/// One ZooKeeper server process.
#[derive(Debug)]
pub struct ZkMember {
    id: usize,
    ports: MemberPorts,
    // Declared before `dir`: the process dies before its directory goes.
    process: ChildProcess,
    dir: TempDir,
}

process_controls!(ZkMember);

impl ZkMember {
    fn new(member: &MemberConfig<'_>, java: &Path, classpath: &str) -> Result<Self, LaunchError> {
        let MemberConfig {
            id, ports, servers, ..
        } = *member;
        let label = format!("ZooKeeper server {id} (127.0.0.1:{})", ports.client);
        let io_error = |source| LaunchError::Io {
            what: label.clone(),
            source,
        };
        let dir = temp_dir("distlock-zk-", &label)?;
        let data_dir = dir.path().join("data");
        fs::create_dir(&data_dir).map_err(io_error)?;
        if !servers.is_empty() {
            fs::write(data_dir.join("myid"), format!("{id}\n")).map_err(io_error)?;
        }
        let config = dir.path().join("zoo.cfg");
        fs::write(&config, zoo_cfg(&data_dir, member)).map_err(io_error)?;
        let log4j = dir.path().join("log4j.properties");
        fs::write(&log4j, LOG4J_PROPERTIES).map_err(io_error)?;

        let mut args: Vec<OsString> = JVM_FLAGS.iter().map(OsString::from).collect();
        args.push(format!("-Dlog4j.configuration=file:{}", log4j.display()).into());
        args.extend([
            "-cp".into(),
            classpath.into(),
            MAIN_CLASS.into(),
            config.into_os_string(),
        ]);
        let process = ChildProcess::new(label, java.to_owned(), args, dir.path(), "zookeeper.log");
        Ok(Self {
            id,
            ports,
            process,
            dir,
        })
    }

    /// The server's `myid` (1-based).
    pub fn id(&self) -> usize {
        self.id
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.ports.client
    }

    /// The client address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.ports.client)
    }

    /// The server's temporary directory (config, data and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (stdout and stderr, across restarts).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The `Mode:` from `srvr` (`standalone`, `leader`, `follower`), or
    /// `None` if the server does not serve or answer right now.
    pub async fn mode(&self) -> Option<String> {
        let srvr = tokio::time::timeout(QUERY_TIMEOUT, four_letter_word(&self.addr(), "srvr"))
            .await
            .ok()?
            .ok()?;
        parse_mode(&srvr).map(str::to_owned)
    }

    /// Kills the server if it runs, starts it again with the same ports and
    /// data directory, and waits until it serves again.
    pub async fn restart(&self) -> Result<(), LaunchError> {
        self.process.kill().await;
        self.process.spawn()?;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<(), LaunchError> {
        wait_ready(&self.process, READY_TIMEOUT, || async {
            let srvr = four_letter_word(&self.addr(), "srvr")
                .await
                .map_err(|err| format!("srvr: {err}"))?;
            match parse_mode(&srvr) {
                Some(_) => Ok(()),
                None => Err(format!("srvr answered {:?}", srvr.trim())),
            }
        })
        .await
    }
}

/// Sends a four-letter command (`srvr`, `stat`, `mntr`, `ruok`) to the
/// ZooKeeper server at `addr` and returns its whole answer. Only the
/// commands whitelisted by the launchers (`ruok,srvr,stat,mntr`) answer.
pub async fn four_letter_word(addr: &str, command: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(command.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn parse_mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|line| line.strip_prefix("Mode:"))
        .map(str::trim)
}

fn zoo_cfg(data_dir: &Path, member: &MemberConfig<'_>) -> String {
    let (min_session, max_session) = member.session_timeouts;
    let (min_session, max_session) = (min_session.as_millis(), max_session.as_millis());
    let client_port = member.ports.client;
    let servers = member.servers;
    let sync_limit = member.sync_limit;
    format!(
        "\
tickTime=100
initLimit=50
syncLimit={sync_limit}
minSessionTimeout={min_session}
maxSessionTimeout={max_session}
dataDir={}
clientPort={client_port}
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
forceSync=no
preAllocSize=1024
cnxTimeout=1000
{servers}",
        data_dir.display()
    )
}

/// `zookeeper.jar` (required) plus the logging jars (if present).
fn classpath(jar_dir: &Path) -> Result<String, LaunchError> {
    let zookeeper = ZOOKEEPER_JAR.file_at(&jar_dir.join("zookeeper.jar"))?;
    let mut entries = vec![zookeeper.display().to_string()];
    entries.extend(
        LOGGING_JARS
            .iter()
            .map(|jar| jar_dir.join(jar))
            .filter(|path| path.is_file())
            .map(|path| path.display().to_string()),
    );
    Ok(entries.join(":"))
}
