//! The whole distlock-testkit conformance suite through the facade: every client
//! comes from `distlock::connect_with` for a backend URL, on real servers,
//! for each compiled-in backend. Swapping the URL must change nothing a user
//! relies on. Backend-specific fault tests live in each backend crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock::{Config, DynElectionBackend, ErrorKind, LockBackendExt, LockGuard};
use distlock_testkit::assert::started;
use distlock_testkit::conformance::Target;
#[cfg(feature = "etcd")]
use distlock_testkit::servers::EtcdCluster;
#[cfg(feature = "redis")]
use distlock_testkit::servers::{RedisCluster, RedisServer, RedisServers};

/// A backend under test by URL, with what acting on it from outside needs.
struct UrlTarget {
    url: String,
    ttl: Duration,
    outside: Outside,
}

/// The servers behind a target's URL, kept alive with it, and how to end a
/// lease or silence a holder on them.
enum Outside {
    /// `memory://NAME` and `file:///DIR`: through `distlock::testing`.
    Local(#[allow(dead_code)] Option<tempfile::TempDir>),
    #[cfg(feature = "etcd")]
    Etcd(distlock_testkit::servers::EtcdCluster),
    #[cfg(feature = "redis")]
    Redis(distlock_testkit::servers::RedisServer),
    #[cfg(feature = "redis")]
    Redlock(distlock_testkit::servers::RedisServers),
    #[cfg(feature = "redis")]
    RedisCluster(distlock_testkit::servers::RedisCluster),
    #[cfg(feature = "zk")]
    Zk(zk_outside::ZkOutside),
    #[cfg(feature = "postgres")]
    Postgres(distlock_testkit::servers::PostgresServer),
}

/// The lock TTL of the Redis targets.
#[cfg(feature = "redis")]
const REDIS_TTL: Duration = Duration::from_millis(600);

impl UrlTarget {
    fn new(url: String, ttl: Duration, outside: Outside) -> Self {
        UrlTarget { url, ttl, outside }
    }

    /// A fresh in-process server: a memory URL no other test uses.
    fn memory() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let url = format!("memory://conformance-{n}");
        // As distlock-core's own conformance target.
        UrlTarget::new(url, Duration::from_millis(400), Outside::Local(None))
    }

    /// A fresh lock directory.
    fn file() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("file://{}", dir.path().display());
        // As distlock-file's conformance target: renewal must keep up on a busy
        // two-core machine.
        let ttl = Duration::from_millis(2000);
        UrlTarget::new(url, ttl, Outside::Local(Some(dir)))
    }

    /// etcd, with its minimum lease TTL.
    #[cfg(feature = "etcd")]
    async fn etcd() -> Self {
        let cluster = started(EtcdCluster::start(1)).await;
        let url = format!("etcd://{}", cluster.endpoints().join(","));
        UrlTarget::new(url, Duration::from_secs(1), Outside::Etcd(cluster))
    }

    #[cfg(feature = "redis")]
    async fn redis() -> Self {
        let server = started(RedisServer::start()).await;
        UrlTarget::new(server.url(), REDIS_TTL, Outside::Redis(server))
    }

    #[cfg(feature = "redis")]
    async fn redlock() -> Self {
        let servers = started(RedisServers::start(3)).await;
        let url = format!("redlock://{}", servers.addrs().join(","));
        UrlTarget::new(url, REDIS_TTL, Outside::Redlock(servers))
    }

    /// Three masters without replicas.
    #[cfg(feature = "redis")]
    async fn redis_cluster() -> Self {
        let cluster = started(RedisCluster::start(3, 0)).await;
        UrlTarget::new(cluster.url(), REDIS_TTL, Outside::RedisCluster(cluster))
    }

    /// Each client connects through its own proxy; see `connect`.
    #[cfg(feature = "zk")]
    async fn zk() -> Self {
        let outside = zk_outside::ZkOutside::start().await;
        let url = format!("zk://{}", outside.server_addr());
        UrlTarget::new(url, zk_outside::TTL, Outside::Zk(outside))
    }

    /// As distlock-postgres's conformance target: one server, a lease of 1 s.
    #[cfg(feature = "postgres")]
    async fn postgres() -> Self {
        let server = started(distlock_testkit::servers::PostgresServer::start()).await;
        UrlTarget::new(
            server.url(),
            Duration::from_secs(1),
            Outside::Postgres(server),
        )
    }

    /// A new, independent client through the facade.
    async fn connect(&self) -> distlock::Backend {
        #[cfg(feature = "zk")]
        if let Outside::Zk(zk) = &self.outside {
            return zk.connect(self.ttl).await;
        }
        connect_url(&self.url, self.ttl).await
    }
}

/// `distlock::connect_with` for `url` with the tests' short TTL.
async fn connect_url(url: &str, ttl: Duration) -> distlock::Backend {
    let config = Config {
        settings: distlock::Settings {
            ttl: Some(ttl),
            ..distlock::Settings::default()
        },
        ..Config::from_url(url)
    };
    distlock::connect_with(&config)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

#[async_trait]
impl Target for UrlTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        self.connect()
            .await
            .election_backend()
            .expect("the backend declares election")
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        match &self.outside {
            Outside::Local(_) => {
                let ended = distlock::testing::expire_now(&self.url, guard)
                    .await
                    .expect("expire");
                assert!(ended, "no holder of {} to expire", guard.key());
            }
            #[cfg(feature = "etcd")]
            Outside::Etcd(cluster) => {
                let key = guard.key();
                let lease = distlock::etcd::lease_of_key(key)
                    .unwrap_or_else(|| panic!("no lease id in key {key}"));
                distlock::etcd::etcd_client::Client::connect(cluster.endpoints(), None)
                    .await
                    .expect("raw etcd client")
                    .lease_revoke(lease)
                    .await
                    .expect("revoke the holder's lease");
            }
            #[cfg(feature = "redis")]
            Outside::Redis(server) => {
                let reply = server.command(&["DEL", guard.key()]).await.expect("DEL");
                assert_eq!(
                    reply,
                    distlock_testkit::servers::RespReply::Integer(1),
                    "no lock key {} to delete",
                    guard.key()
                );
            }
            #[cfg(feature = "redis")]
            Outside::Redlock(servers) => {
                let mut deleted = 0;
                for server in servers.servers() {
                    let reply = server.command(&["DEL", guard.key()]).await.expect("DEL");
                    if reply == distlock_testkit::servers::RespReply::Integer(1) {
                        deleted += 1;
                    }
                }
                assert!(
                    deleted >= 2,
                    "lock key {} held on only {deleted} servers",
                    guard.key()
                );
            }
            #[cfg(feature = "redis")]
            Outside::RedisCluster(cluster) => {
                let master = cluster.master_for_key(guard.key()).await.expect("master");
                let reply = master.command(&["DEL", guard.key()]).await.expect("DEL");
                assert_eq!(
                    reply,
                    distlock_testkit::servers::RespReply::Integer(1),
                    "no lock key {} on its master {}",
                    guard.key(),
                    master.addr()
                );
            }
            #[cfg(feature = "zk")]
            Outside::Zk(zk) => zk.delete_node(guard.key()).await,
            #[cfg(feature = "postgres")]
            Outside::Postgres(server) => {
                // The lease ends now by the server's clock, as expiry would.
                let sql = format!(
                    "UPDATE distlock.entries SET expires_at = clock_timestamp() \
                     WHERE key = '{}' AND token = {} RETURNING 1",
                    guard.key().replace('\'', "''"),
                    guard.token()
                );
                let ended = server.query(&sql).expect("expire the lease");
                assert_eq!(
                    ended.lines().next().map(str::trim),
                    Some("1"),
                    "no entry for {} token {}",
                    guard.key(),
                    guard.token()
                );
            }
        }
    }

    async fn crash(&self, guard: LockGuard) {
        #[cfg(feature = "zk")]
        if let Outside::Zk(zk) = &self.outside {
            return zk.crash(guard).await;
        }
        guard.abandon();
    }
}

/// ZooKeeper leases belong to the client's session, so a crash must silence
/// the holder's whole connection: every client connects through its own
/// fault proxy, and learns its session id from the owner of a probe node.
#[cfg(feature = "zk")]
mod zk_outside {
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use distlock::LockBackendExt;
    use distlock::LockGuard;
    use distlock::zk::zk;
    use distlock_testkit::proxy::FaultProxy;
    use distlock_testkit::servers::ZkEnsemble;

    /// The session timeout, hence the lock TTL, as in distlock-zk's conformance target.
    pub(super) const TTL: Duration = Duration::from_secs(2);

    pub(super) struct ZkOutside {
        server: ZkEnsemble,
        admin: zk::Client,
        /// Each client's session id and the proxy its connection goes through.
        clients: Mutex<Vec<(i64, FaultProxy)>>,
        probes: AtomicU64,
    }

    impl ZkOutside {
        pub(super) async fn start() -> Self {
            let server = ZkEnsemble::start(1).await.unwrap_or_else(|e| panic!("{e}"));
            let admin = tokio::time::timeout(
                Duration::from_secs(10),
                zk::Client::connector()
                    .with_session_timeout(Duration::from_secs(10))
                    .connect(&server.connect_string()),
            )
            .await
            .expect("admin client connect timed out")
            .expect("admin client connect");
            ZkOutside {
                server,
                admin,
                clients: Mutex::new(Vec::new()),
                probes: AtomicU64::new(0),
            }
        }

        pub(super) fn server_addr(&self) -> String {
            self.server.addrs()[0].clone()
        }

        /// A facade client whose connection goes through a new proxy.
        pub(super) async fn connect(&self, ttl: Duration) -> distlock::Backend {
            let upstream: SocketAddr = self.server_addr().parse().expect("server address");
            let proxy = FaultProxy::start(upstream)
                .await
                .expect("start fault proxy");
            let backend = super::connect_url(&format!("zk://{}", proxy.addr()), ttl).await;
            let n = self.probes.fetch_add(1, Ordering::Relaxed);
            let probe = backend
                .try_lock(&format!("urltarget/session-probe-{n}"))
                .await
                .expect("probe lock");
            let session = self.owner_of(probe.key()).await;
            probe.release().await.expect("release the probe");
            self.clients.lock().unwrap().push((session, proxy));
            backend
        }

        async fn owner_of(&self, node: &str) -> i64 {
            let (_, stat) = self
                .admin
                .get_data(node)
                .await
                .expect("read the holder's node");
            stat.ephemeral_owner
        }

        /// Deletes the holder's node through another session.
        pub(super) async fn delete_node(&self, node: &str) {
            self.admin
                .delete(node, None)
                .await
                .expect("delete the holder's node from outside");
        }

        /// Blackholes the holder's connection: its session gets no heartbeats
        /// through, so the server expires it after the session timeout.
        pub(super) async fn crash(&self, guard: LockGuard) {
            let owner = self.owner_of(guard.key()).await;
            let clients = self.clients.lock().unwrap();
            let (_, proxy) = clients
                .iter()
                .find(|(session, _)| *session == owner)
                .expect("the node belongs to one of our clients");
            proxy.blackhole();
            guard.abandon();
        }
    }
}

/// A module `NAME` of the whole conformance suite on a fresh `TARGET` per test.
macro_rules! suites {
    ($($(#[$attr:meta])* $name:ident => $target:expr;)+) => {$(
        $(#[$attr])*
        mod $name {
            use super::*;
            distlock_testkit::conformance_tests!($target);
        }
    )+};
}

suites! {
    memory => UrlTarget::memory();
    file => UrlTarget::file();
    #[cfg(feature = "etcd")]
    etcd => UrlTarget::etcd().await;
    #[cfg(feature = "redis")]
    redis => UrlTarget::redis().await;
    #[cfg(feature = "redis")]
    redlock => UrlTarget::redlock().await;
    #[cfg(feature = "redis")]
    redis_cluster => UrlTarget::redis_cluster().await;
    #[cfg(feature = "zk")]
    zk => UrlTarget::zk().await;
    #[cfg(feature = "postgres")]
    postgres => UrlTarget::postgres().await;
}

#[tokio::test]
async fn unknown_and_uncompiled_schemes_are_typed_errors() {
    let err = distlock::connect("consul://h:8500").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.message().contains("known schemes"), "{err}");
    let err = distlock::connect("no-scheme-here").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    for scheme in distlock::Scheme::ALL {
        if !scheme.is_compiled_in() {
            let err = distlock::connect(&format!("{scheme}://127.0.0.1:1"))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        }
    }
}

#[tokio::test]
async fn memory_urls_with_the_same_name_share_locks() {
    let a = distlock::connect("memory://shared-test").await.unwrap();
    let b = distlock::connect("memory://shared-test").await.unwrap();
    let c = distlock::connect("memory://other-test").await.unwrap();
    let held = a.lock("x").await.unwrap();
    assert_eq!(
        b.try_lock("x").await.unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    c.try_lock("x")
        .await
        .expect("a different memory server")
        .release()
        .await
        .unwrap();
    held.release().await.unwrap();
}

/// The test hook ends only what it is given: a guard of another memory
/// server with the same lock name and key shape stays held.
#[tokio::test]
async fn testing_expire_now_ends_exactly_the_given_memory_lease() {
    let (a, b) = (
        distlock::connect("memory://expire-a").await.unwrap(),
        distlock::connect("memory://expire-b").await.unwrap(),
    );
    let held_a = a.lock("x").await.unwrap();
    let held_b = b.lock("x").await.unwrap();
    assert_ne!(held_a.key(), held_b.key(), "keys are unique in the process");
    assert!(
        distlock::testing::expire_now("memory://expire-a", &held_a)
            .await
            .unwrap()
    );
    held_a.lost().await;
    assert!(held_b.is_held());
    let err = distlock::testing::expire_now("redis://127.0.0.1:1", &held_b)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    held_b.release().await.unwrap();
}
