//! [`connect`]: from a URL or a [`Config`] to the core trait objects.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Candidacy, Capabilities, DynElectionBackend, DynLockBackend, ElectionBackend,
    Error, LeaderInfo, LeaderStream, Leadership, LockBackend, LockGuard, LockName, Result,
};

use crate::backends;
use crate::config::Config;
use crate::guarded::Native;
use crate::scheme::Scheme;

/// Extra time allowed over the connect timeout before `connect` gives up on
/// a backend that does not honour it.
const CONNECT_SLACK: Duration = Duration::from_secs(2);
/// The connect bound used when the config sets none.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected backend, chosen at run time: one client that locks and,
/// where [`Capabilities::election`] says so, elects leaders.
///
/// `Backend` itself implements [`LockBackend`] and [`ElectionBackend`] by
/// delegation, so [`LockBackendExt`](distlock_core::LockBackendExt) methods work
/// on it directly, and so do the string-named election calls of
/// [`ElectionBackendExt`](crate::ElectionBackendExt) (both in
/// [`prelude`](crate::prelude)). Election calls on a backend without
/// election fail with `Unsupported`. Guarded writes
/// ([`guarded_put`](Self::guarded_put)) work where the backend has them.
/// Cloning shares the connection.
#[derive(Clone)]
pub struct Backend {
    client: Arc<DynElectionBackend>,
    scheme: Scheme,
    description: String,
    native: Native,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("url", &self.description)
            .field("backend", &self.client)
            .finish()
    }
}

impl Backend {
    pub(crate) fn new(
        scheme: Scheme,
        description: String,
        client: Arc<DynElectionBackend>,
    ) -> Self {
        Backend {
            client,
            scheme,
            description,
            native: Native::plain(),
        }
    }

    /// Keeps the concrete client for what only it can do (guarded writes).
    pub(crate) fn with_native(mut self, native: Native) -> Self {
        self.native = native;
        self
    }

    pub(crate) fn native(&self) -> &Native {
        &self.native
    }

    /// The URL scheme this backend was chosen by.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The backend's URL with any password masked.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// What the backend promises.
    pub fn capabilities(&self) -> Capabilities {
        self.client.capabilities()
    }

    /// The lock service as a trait object.
    pub fn lock_backend(&self) -> Arc<DynLockBackend> {
        self.client.clone()
    }

    /// The election service, if [`Capabilities::election`] says the backend has one.
    pub fn election_backend(&self) -> Option<Arc<DynElectionBackend>> {
        self.capabilities().election.then(|| self.client.clone())
    }

    fn election(&self) -> Result<&DynElectionBackend> {
        if self.capabilities().election {
            return Ok(&*self.client);
        }
        Err(Error::unsupported(format!(
            "the backend at {} has no leader election",
            self.description
        )))
    }
}

#[async_trait]
impl LockBackend for Backend {
    fn capabilities(&self) -> Capabilities {
        self.client.capabilities()
    }

    fn default_ttl(&self) -> Duration {
        self.client.default_ttl()
    }

    /// # Cancel safety
    ///
    /// As the underlying backend's [`LockBackend::acquire_request`].
    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        self.client.acquire_request(request).await
    }

    /// # Cancel safety
    ///
    /// As the underlying backend's [`LockBackend::inspect`].
    async fn inspect(&self, name: &LockName) -> Result<distlock_core::LockStatus> {
        self.client.inspect(name).await
    }

    /// # Cancel safety
    ///
    /// As the underlying backend's [`LockBackend::list`].
    async fn list(&self, options: &distlock_core::ListOptions) -> Result<distlock_core::ListPage> {
        self.client.list(options).await
    }

    /// # Cancel safety
    ///
    /// As the underlying backend's [`LockBackend::force_release`].
    async fn force_release(&self, name: &LockName) -> Result<Option<distlock_core::HolderInfo>> {
        self.client.force_release(name).await
    }
}

#[async_trait]
impl ElectionBackend for Backend {
    /// # Cancel safety
    ///
    /// As the underlying backend's [`ElectionBackend::campaign`].
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
        self.election()?.campaign(name, bid).await
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        self.election()?.leader(name).await
    }

    /// The chosen backend's stream, under the rule every backend keeps: an
    /// error is yielded once, a retryable one is followed by more leaders,
    /// any other ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        self.election()?.observe(name).await
    }
}

#[cfg(feature = "etcd")]
impl From<distlock_etcd::EtcdBackend> for Backend {
    /// A facade over an etcd backend configured by hand, guarded writes included.
    fn from(etcd: distlock_etcd::EtcdBackend) -> Self {
        let config = etcd.config();
        let scheme = if config.uses_tls() {
            Scheme::Etcds
        } else {
            Scheme::Etcd
        };
        let description = format!("{scheme}://{}", config.endpoints.join(","));
        Backend::new(scheme, description, Arc::new(etcd.clone())).with_native(Native::guarded(etcd))
    }
}

#[cfg(feature = "zk")]
impl From<distlock_zk::ZkBackend> for Backend {
    /// A facade over a ZooKeeper backend configured by hand, guarded writes included.
    fn from(zk: distlock_zk::ZkBackend) -> Self {
        let description = format!("zk://{}", zk.config().servers.join(","));
        Backend::new(Scheme::Zk, description, Arc::new(zk.clone())).with_native(Native::guarded(zk))
    }
}

#[cfg(feature = "redis")]
impl From<distlock_redis::RedisBackend> for Backend {
    /// A facade over a Redis backend configured by hand, guarded writes included.
    fn from(redis: distlock_redis::RedisBackend) -> Self {
        let config = redis.config();
        let scheme = if config.common.tls.enabled {
            Scheme::Rediss
        } else {
            Scheme::Redis
        };
        let description = format!("{scheme}://{}/{}", config.server, config.common.db);
        Backend::new(scheme, description, Arc::new(redis.clone()))
            .with_native(Native::guarded(redis))
    }
}

#[cfg(feature = "redis")]
impl From<distlock_redis::RedisClusterBackend> for Backend {
    /// A facade over a Redis Cluster backend configured by hand, guarded
    /// writes included.
    fn from(cluster: distlock_redis::RedisClusterBackend) -> Self {
        let config = cluster.config();
        let scheme = if config.common.tls.enabled {
            Scheme::RedissCluster
        } else {
            Scheme::RedisCluster
        };
        let description = format!("{scheme}://{}", addresses(&config.nodes));
        Backend::new(scheme, description, Arc::new(cluster.clone()))
            .with_native(Native::guarded(cluster))
    }
}

#[cfg(feature = "redis")]
impl From<distlock_redis::RedlockBackend> for Backend {
    /// A facade over a Redlock backend configured by hand (it has no
    /// guarded writes).
    fn from(redlock: distlock_redis::RedlockBackend) -> Self {
        let description = format!("redlock://{}", addresses(&redlock.config().servers));
        Backend::new(Scheme::Redlock, description, Arc::new(redlock))
    }
}

/// `servers` as a URL lists them.
#[cfg(feature = "redis")]
fn addresses(servers: &[distlock_redis::ServerAddr]) -> String {
    let listed: Vec<String> = servers.iter().map(ToString::to_string).collect();
    listed.join(",")
}

#[cfg(feature = "postgres")]
impl From<distlock_postgres::PostgresBackend> for Backend {
    /// A facade over a PostgreSQL backend configured by hand, its fenced
    /// transactions reachable through [`Backend::postgres`].
    fn from(postgres: distlock_postgres::PostgresBackend) -> Self {
        let description = format!("postgres://{}", postgres.config().address());
        Backend::new(Scheme::Postgres, description, Arc::new(postgres.clone()))
            .with_native(Native::of(postgres))
    }
}

#[cfg(feature = "mysql")]
impl From<distlock_mysql::MysqlBackend> for Backend {
    /// A facade over a MySQL/MariaDB backend configured by hand, its fenced
    /// transactions reachable through [`Backend::mysql`].
    fn from(mysql: distlock_mysql::MysqlBackend) -> Self {
        let description = format!("mysql://{}", mysql.config().address());
        Backend::new(Scheme::Mysql, description, Arc::new(mysql.clone()))
            .with_native(Native::of(mysql))
    }
}

impl From<distlock_file::FileBackend> for Backend {
    /// A facade over a file backend configured by hand.
    fn from(file: distlock_file::FileBackend) -> Self {
        let description = format!("file://{}", file.dir().display());
        Backend::new(Scheme::File, description, Arc::new(file))
    }
}

impl From<distlock_core::memory::MemoryBackend> for Backend {
    /// A facade over an in-memory backend made by hand; clones of it share
    /// its locks.
    fn from(memory: distlock_core::memory::MemoryBackend) -> Self {
        Backend::new(Scheme::Memory, "memory://".to_owned(), Arc::new(memory))
    }
}

/// Connects to the backend named by `url`.
///
/// Accepted: `memory://[NAME]`, `file:///DIR`, `etcd://…`, `etcds://…`,
/// `redis://…`, `rediss://…`, `redlock://…`, `redis+cluster://…`,
/// `rediss+cluster://…`, `zk://…`, `postgres://…`, `postgresql://…`. A scheme whose cargo feature is off
/// gives `Unsupported` naming the feature; an unknown scheme gives
/// `InvalidConfig` listing the known ones.
///
/// `memory://` is process-local: it excludes the tasks of this process
/// only. Another process that connects to `memory://` gets a table of its
/// own and the same tokens, so the two do not exclude each other. Its
/// [`Capabilities::cross_process`](crate::Capabilities::cross_process) is
/// `false` for code to check, and the first `memory://` connect of a
/// process logs a `tracing` warning saying so. For the processes of one
/// machine use `file:///DIR`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
/// use distlock::LockBackendExt;
/// let backend = distlock::connect("memory://").await?;
/// let guard = backend.lock("jobs/report").await?;
/// guard.release().await?;
/// let err = distlock::connect("consul://h:8500").await.unwrap_err();
/// assert_eq!(err.kind(), distlock::ErrorKind::InvalidConfig);
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// Cancel safe: a cancelled connect leaves nothing behind but its closed connections.
pub async fn connect(url: &str) -> Result<Backend> {
    connect_with(&Config::from_url(url)).await
}

/// Connects as `config` says; with no URL, to the embedded default (the file
/// backend in the machine-wide `/var/tmp/distlock`).
///
/// Never waits longer than the connect timeout (default 5 s) plus 2 s.
///
/// # Cancel safety
///
/// Cancel safe: a cancelled connect leaves nothing behind but its closed connections.
pub async fn connect_with(config: &Config) -> Result<Backend> {
    config.validate()?;
    let url = config.effective_url();
    let scheme = Scheme::of_url(&url)?;
    scheme.ensure_compiled_in()?;
    let limit = config
        .settings()
        .connect_timeout
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT)
        + CONNECT_SLACK;
    let description = config.redacted_url();
    match tokio::time::timeout(limit, backends::connect(scheme, &url, config)).await {
        Ok(Ok((client, native))) => {
            tracing::debug!(url = %description, "connected");
            Ok(Backend::new(scheme, description, client).with_native(native))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::timeout(format!(
            "connecting to {description} took longer than {}; is the server running \
             and reachable?",
            crate::human_duration(limit)
        ))),
    }
}
