//! Shared test helpers: real ZooKeeper servers, backends through fault
//! proxies, and a raw admin client that acts from outside.

#![allow(dead_code, missing_docs)]

use distlock_zk::ClientConfig;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockBackendExt, LockGuard};
use distlock_testkit::conformance::Target;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::ZkEnsemble;
use distlock_zk::{ZkBackend, ZkConfig, zk};

/// Starts `members` ZooKeeper servers, or fails naming the install script.
pub(crate) async fn start_zk(members: usize) -> ZkEnsemble {
    ZkEnsemble::start(members)
        .await
        .unwrap_or_else(|e| panic!("cannot start ZooKeeper for the test: {e}"))
}

/// One server and an admin client acting from outside: where most
/// single-server tests start. Bound by reference,
/// `let Standalone { addrs, admin, .. } = &standalone().await;`
/// keeps the server up to the end of the test.
pub(crate) struct Standalone {
    pub(crate) server: ZkEnsemble,
    pub(crate) addrs: Vec<String>,
    pub(crate) admin: zk::Client,
}

/// Starts a [`Standalone`], with [`init_tracing`] first.
pub(crate) async fn standalone() -> Standalone {
    init_tracing();
    let server = start_zk(1).await;
    let addrs = server.addrs();
    let admin = raw_client(&addrs, None).await;
    Standalone {
        server,
        addrs,
        admin,
    }
}

/// Waits until `condition` holds, checking every 20 ms, or panics after `bound`.
pub(crate) async fn wait_until(
    bound: Duration,
    what: &str,
    mut condition: impl AsyncFnMut() -> bool,
) {
    let deadline = tokio::time::Instant::now() + bound;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's `zk_watch_count` from `mntr`.
pub(crate) async fn watch_count(addr: &str) -> usize {
    let mntr = distlock_testkit::servers::zk::four_letter_word(addr, "mntr")
        .await
        .expect("mntr");
    mntr.lines()
        .find_map(|line| line.strip_prefix("zk_watch_count"))
        .and_then(|n| n.trim().parse().ok())
        .expect("mntr shows zk_watch_count")
}

/// Waits until the server counts at least `n` watches, so that a test acts
/// only once the watches it relies on are armed; panics after `bound`.
pub(crate) async fn until_watches(addr: &str, n: usize, bound: Duration) {
    let what = format!("{n} watches on {addr}");
    wait_until(bound, &what, async || watch_count(addr).await >= n).await;
}

/// Waits until `dir` has exactly `n` children, or panics after `bound`.
pub(crate) async fn until_children(
    admin: &zk::Client,
    dir: &str,
    n: usize,
    bound: Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let children = admin.list_children(dir).await.unwrap_or_default();
        if children.len() == n {
            return children;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{dir} has {children:?}, expected {n} children within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A config for `servers` under `prefix` with test-sized timeouts.
pub(crate) fn config(servers: &[String], prefix: &str, session: Duration) -> ZkConfig {
    ZkConfig::new(servers.iter().cloned())
        .with_prefix(prefix)
        .with_session_timeout(session)
        .with_connect_timeout(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(3))
}

/// A backend on `servers` with [`config`]'s test-sized timeouts.
pub(crate) async fn connect(servers: &[String], prefix: &str, session: Duration) -> ZkBackend {
    ZkBackend::connect(config(servers, prefix, session))
        .await
        .expect("connect")
}

/// Two independent backends on `servers`, as two processes contending.
pub(crate) async fn connect_pair(
    servers: &[String],
    prefix: &str,
    session: Duration,
) -> (ZkBackend, ZkBackend) {
    (
        connect(servers, prefix, session).await,
        connect(servers, prefix, session).await,
    )
}

/// Takes `name` without waiting and gives it back: proves that nothing
/// holds or queues for it right now (`why` says what the test expects).
pub(crate) async fn lock_and_release(backend: &ZkBackend, name: &str, why: &str) {
    distlock_testkit::assert::acquired_and_released(why, backend.try_lock(name)).await;
}

/// The index of the ensemble's leader, which every test of a quorum needs.
pub(crate) async fn leader(ensemble: &ZkEnsemble) -> usize {
    ensemble
        .leader_index()
        .await
        .expect("the ensemble has a leader")
}

/// A raw client acting from outside the backend, optionally with digest auth.
pub(crate) async fn raw_client(servers: &[String], auth: Option<&str>) -> zk::Client {
    let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(10));
    if let Some(auth) = auth {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    tokio::time::timeout(
        Duration::from_secs(10),
        connector.connect(&servers.join(",")),
    )
    .await
    .expect("raw client connect timed out")
    .expect("raw client connect")
}

/// A backend whose every byte goes through its own fault proxy.
pub(crate) struct Proxied {
    pub(crate) backend: ZkBackend,
    pub(crate) proxy: FaultProxy,
}

pub(crate) async fn proxied(upstream: &str, prefix: &str, session: Duration) -> Proxied {
    proxied_with(upstream, prefix, session, |config| config).await
}

/// A [`proxied`] backend whose test config `configure` changes first.
pub(crate) async fn proxied_with(
    upstream: &str,
    prefix: &str,
    session: Duration,
    configure: impl FnOnce(ZkConfig) -> ZkConfig,
) -> Proxied {
    let upstream: SocketAddr = upstream.parse().expect("server address");
    let proxy = FaultProxy::start(upstream)
        .await
        .expect("start fault proxy");
    let config = configure(config(&[proxy.addr().to_string()], prefix, session));
    let backend = ZkBackend::connect(config)
        .await
        .expect("connect through the proxy");
    Proxied { backend, proxy }
}

/// The conformance target: a standalone server, every client behind its own
/// fault proxy so that `crash` can silence exactly one session.
pub(crate) struct ZkTarget {
    server: ZkEnsemble,
    admin: zk::Client,
    clients: Mutex<Vec<Arc<Proxied>>>,
}

/// The session timeout, hence the lock TTL, of conformance clients.
pub(crate) const TTL: Duration = Duration::from_secs(2);

impl ZkTarget {
    pub(crate) async fn start() -> Self {
        let server = start_zk(1).await;
        let admin = raw_client(&server.addrs(), None).await;
        ZkTarget {
            server,
            admin,
            clients: Mutex::new(Vec::new()),
        }
    }

    async fn new_backend(&self) -> ZkBackend {
        let client = Arc::new(proxied(&self.server.addrs()[0], "/conformance", TTL).await);
        let backend = client.backend.clone();
        self.clients.lock().unwrap().push(client);
        backend
    }
}

#[async_trait]
impl Target for ZkTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(self.new_backend().await)
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    /// Deletes the holder's node through another session.
    async fn kill_lease(&self, guard: &LockGuard) {
        self.admin
            .delete(guard.key(), None)
            .await
            .expect("delete the holder's node from outside");
    }

    /// Blackholes the holder's connection: its session gets no heartbeats
    /// through, so the server expires it after the session timeout.
    async fn crash(&self, guard: LockGuard) {
        let (_, stat) = self
            .admin
            .get_data(guard.key())
            .await
            .expect("read the holder's node");
        let clients = self.clients.lock().unwrap().clone();
        let holder = clients
            .iter()
            .find(|c| c.backend.session_id() == stat.ephemeral_owner)
            .expect("the node belongs to one of our clients");
        holder.proxy.blackhole();
        guard.abandon();
    }
}

/// Logs through the test harness, filtered by `RUST_LOG` (off by default).
pub(crate) fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
}
