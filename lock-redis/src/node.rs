//! One Redis server, or one Redis Cluster, as a backend instance sees it: a
//! self-healing command connection, a pub/sub connection for wake-ups, and
//! timeouts on every call.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Once};
use std::time::Duration;

use distlock_core::{Error, ErrorKind, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, FromRedisValue,
    IntoConnectionInfo, RedisConnectionInfo, RedisResult, Script, TlsCertificates,
};
use tokio::time::timeout;

use crate::cluster;
use crate::config::{CommonConfig, ServerAddr};
use distlock_core::raw::Site;

use crate::endpoint::{Endpoint, ScriptCall};
use crate::errors::{RedisSite, kind_of};
use crate::scripts::SCRIPTS;
use crate::wakeups::{Link, WakeTask, Wakeups};

/// One server or cluster: commands go through `endpoint`, wake-ups arrive
/// on `wakeups`.
#[derive(Clone)]
pub(crate) struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    /// `host:port`, or a cluster's seeds `h1:p1,h2:p2`.
    addr: String,
    backend: &'static str,
    endpoint: Endpoint,
    connect_timeout: Duration,
    request_timeout: Duration,
    wakeups: Arc<Wakeups>,
    _wake_task: WakeTask,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("backend", &self.inner.backend)
            .field("addr", &self.inner.addr)
            .field("wakeups", &self.inner.wakeups)
            .finish()
    }
}

impl Node {
    /// Sets up the connections to `at` without waiting for them;
    /// [`Node::probe`] checks that it is reachable and accepts our
    /// credentials.
    pub(crate) fn new(
        backend: &'static str,
        at: At<'_>,
        common: &CommonConfig,
        instance_channel: String,
    ) -> Result<Node> {
        let (addr, endpoint, subscribe_at) = match at {
            At::Server(server) => server_endpoint(backend, server, common)?,
            At::Cluster(seeds) => cluster_endpoint(backend, seeds, common)?,
        };
        let (wakeups, wake_task) = Wakeups::start(
            subscribe_at,
            instance_channel,
            common.connect_timeout,
            common.request_timeout,
        );
        Ok(Node {
            inner: Arc::new(NodeInner {
                addr,
                backend,
                endpoint,
                connect_timeout: common.connect_timeout,
                request_timeout: common.request_timeout,
                wakeups,
                _wake_task: wake_task,
            }),
        })
    }

    /// Connects once, authenticates, selects the database and pings, within
    /// the connect timeout; then waits (within what is left of it) for the
    /// pub/sub connection. Fails with `Unavailable`, `Unauthorized` or
    /// `InvalidConfig` naming the address.
    pub(crate) async fn probe(&self) -> Result<()> {
        let inner = &self.inner;
        let site = Site::new(inner.backend, &inner.addr, "connect");
        let started = tokio::time::Instant::now();
        match timeout(
            inner.connect_timeout,
            check(&inner.endpoint, inner.connect_timeout),
        )
        .await
        {
            Err(_) => return Err(site.unreachable(inner.connect_timeout)),
            Ok(Err(e)) => {
                let detail = e.to_string();
                let kind = kind_of(&e);
                if detail.contains("DB index") {
                    // The URL's path picked a database the server does not
                    // have: a setting to fix, not a server to look into.
                    return Err(Site::error(
                        &site,
                        ErrorKind::InvalidConfig,
                        format_args!(
                            "failed: {detail}; the database number in the URL \
                             (redis://HOST:PORT/DB) must be below the server's `databases` \
                             setting (16 by default)"
                        ),
                    )
                    .with_source(e));
                }
                let mut err = site.client_error(e);
                if kind == ErrorKind::Timeout {
                    err = site.unreachable(inner.connect_timeout);
                } else if matches!(inner.endpoint, Endpoint::Cluster { .. })
                    && !matches!(kind, ErrorKind::Unauthorized | ErrorKind::InvalidConfig)
                {
                    // A cluster client that reached no seed, or not every
                    // master, says so in many ways; all mean unreachable.
                    err = site.unreachable_because(&detail);
                }
                return Err(err);
            }
            Ok(Ok(found)) => {
                for (addr, eviction) in found {
                    check_eviction(
                        inner.backend,
                        addr.as_deref().unwrap_or(&inner.addr),
                        eviction,
                    )?;
                }
            }
        }
        let left = inner.connect_timeout.saturating_sub(started.elapsed());
        match inner.wakeups.wait_ready(left).await {
            Link::Ready => Ok(()),
            Link::Refused(reason) => Err(Error::unauthorized(format!(
                "{} at {}: subscribing to the wake-up channel {} was refused: {reason}; waiting for a lock needs it: grant the user the channels of the key prefix (ACL SETUSER <user> &<prefix>*)",
                inner.backend,
                inner.addr,
                inner.wakeups.instance_channel()
            ))),
            Link::Down => Err(Site {
                operation: "subscribe to the wake-up channel",
                ..site
            }
            .unreachable(inner.connect_timeout)),
        }
    }

    /// `host:port`, or a cluster's seeds, for messages.
    pub(crate) fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The backend name (`redis`, `redis-cluster` or `redlock`), for messages.
    pub(crate) fn backend(&self) -> &'static str {
        self.inner.backend
    }

    /// The server's pub/sub dispatcher.
    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        &self.inner.wakeups
    }

    /// Runs `script` on a new blocking connection, with no async runtime:
    /// for a best-effort release from a guard dropped outside one. Every
    /// step is bounded by the connect or request timeout.
    pub(crate) fn eval_blocking(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<i64> {
        let inner = &self.inner;
        let call = ScriptCall::new(script, keys, args);
        match &inner.endpoint {
            Endpoint::Server { client, .. } => {
                let mut conn = client.get_connection_with_timeout(inner.connect_timeout)?;
                conn.set_read_timeout(Some(inner.request_timeout))?;
                conn.set_write_timeout(Some(inner.request_timeout))?;
                call.run_blocking(&mut conn)
            }
            Endpoint::Cluster { client, .. } => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(inner.connect_timeout)
                    .set_response_timeout(inner.request_timeout);
                call.run_blocking(&mut client.get_connection_with_config(config)?)
            }
        }
    }

    /// Runs `script` with `keys` and `args` within the request timeout.
    /// `what` names the operation in errors ("releasing lock x").
    ///
    /// The arguments are copied before the returned future starts, so it
    /// borrows nothing.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have run.
    pub(crate) fn eval<T: FromRedisValue + Send + 'static>(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[&[u8]],
        what: &str,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        let call = ScriptCall::new(script, keys, args);
        let inner = self.inner.clone();
        let what = what.to_owned();
        async move {
            let site = Site::new(inner.backend, &inner.addr, &what);
            bounded(&site, inner.request_timeout, call.run::<T>(&inner.endpoint)).await
        }
    }
}

impl Node {
    /// Runs `call` (a script built at run time) within the request timeout.
    /// `what` names the operation in errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have run.
    pub(crate) async fn eval_call(
        &self,
        call: &ScriptCall<'_>,
        what: &str,
    ) -> Result<redis::Value> {
        let inner = &self.inner;
        let site = Site::new(inner.backend, &inner.addr, what);
        bounded(&site, inner.request_timeout, call.run(&inner.endpoint)).await
    }
}

/// The result of `work` if it is done within `limit`, its error mapped at
/// `site`.
async fn bounded<T>(
    site: &Site<'_>,
    limit: Duration,
    work: impl Future<Output = RedisResult<T>>,
) -> Result<T> {
    match timeout(limit, work).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(site.client_error(e)),
        Err(_) => Err(site.timed_out(limit)),
    }
}

impl Node {
    /// Every key matching `pattern`, on the server or on every master of the
    /// cluster: `SCAN` with `MATCH`, page after page (`COUNT` 1000), each
    /// page within the request timeout. Costs one round trip per 1000 keys
    /// of the whole database.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub(crate) async fn scan(&self, pattern: &str, what: &str) -> Result<Vec<Vec<u8>>> {
        let inner = &self.inner;
        let site = Site::new(inner.backend, &inner.addr, what);
        let limit = inner.request_timeout;
        let mut keys = Vec::new();
        for master in bounded(&site, limit, inner.endpoint.masters()).await? {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000);
                let page = inner
                    .endpoint
                    .query::<(u64, Vec<Vec<u8>>)>(master.as_ref(), &scan);
                let (next, found) = bounded(&site, limit, page).await?;
                keys.extend(found);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }
}

/// What a node is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum At<'a> {
    /// One server.
    Server(&'a ServerAddr),
    /// A Redis Cluster, through these seed nodes.
    Cluster(&'a [ServerAddr]),
}

/// A node's address for messages, its endpoint, and the servers its
/// wake-ups may be subscribed on, in order.
type Parts = (String, Endpoint, Vec<(Client, String)>);

/// One server: a lazily connecting, self-healing command connection, and
/// wake-ups subscribed on the server itself.
fn server_endpoint(
    backend: &'static str,
    server: &ServerAddr,
    common: &CommonConfig,
) -> Result<Parts> {
    let addr = server.to_string();
    let client = client_for(backend, server, common)?;
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(common.connect_timeout))
        .set_response_timeout(Some(common.request_timeout))
        // One connection attempt per reconnection: a dead server must fail
        // fast (Redlock carries on with the others); the next command tries
        // again.
        .set_number_of_retries(0);
    let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager)
        .map_err(|e| Site::new(backend, &addr, "set up the connection").client_error(e))?;
    let subscribe_at = vec![(client.clone(), addr.clone())];
    Ok((addr, Endpoint::Server { client, conn }, subscribe_at))
}

/// A Redis Cluster: a lazily connecting cluster connection, and wake-ups
/// subscribed on one seed at a time, the next one when it fails (a cluster
/// forwards every `PUBLISH` to all its nodes).
fn cluster_endpoint(
    backend: &'static str,
    seeds: &[ServerAddr],
    common: &CommonConfig,
) -> Result<Parts> {
    let client = cluster::client(backend, seeds, common)?;
    let conn = client.get_pending_async_connection_with_config(cluster::connection_config(common));
    let subscribe_at = seeds
        .iter()
        .map(|seed| Ok((client_for(backend, seed, common)?, seed.to_string())))
        .collect::<Result<Vec<_>>>()?;
    Ok((
        cluster::addrs(seeds),
        Endpoint::Cluster { client, conn },
        subscribe_at,
    ))
}

/// Connects afresh (not through the shared connection, so that the connect
/// timeout bounds it, `limit`), checks that the server answers, loads the
/// scripts on a single server, and reads the eviction settings of every
/// server that keeps keys: the one server (`None`), or each master of a
/// cluster (its address).
async fn check(
    endpoint: &Endpoint,
    limit: Duration,
) -> RedisResult<Vec<(Option<String>, Option<Eviction>)>> {
    match endpoint {
        Endpoint::Server { client, .. } => {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(limit))
                .set_response_timeout(Some(limit));
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            // Load the scripts now, so the first lock operations do not pay
            // a NOSCRIPT round trip. After a server restart the first call
            // of each sends its source (EVAL), which caches it again.
            for script in SCRIPTS.all() {
                script.load_async(&mut conn).await?;
            }
            let reply = eviction_query().query_async(&mut conn).await;
            Ok(vec![(None, eviction_from(reply)?)])
        }
        // A cluster's scripts are cached on each master by the first EVAL
        // that finds them missing there.
        Endpoint::Cluster { client, .. } => {
            // Half the limit to reach the seeds (all at once, waiting for
            // the slowest), half for the commands.
            let config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(limit / 2)
                .set_response_timeout(limit / 2);
            let mut conn = client.get_async_connection_with_config(config).await?;
            let mut found = Vec::new();
            for master in cluster::masters(&mut conn).await? {
                let reply = cluster::on_master(&mut conn, &master, &eviction_query()).await;
                found.push((Some(master.to_string()), eviction_from(reply)?));
            }
            Ok(found)
        }
    }
}

/// The server's eviction settings.
struct Eviction {
    /// Bytes; 0 means no limit, so nothing is evicted.
    maxmemory: u64,
    policy: String,
}

/// Asks for `maxmemory` and `maxmemory-policy`.
fn eviction_query() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory*");
    cmd
}

/// The eviction settings in the `reply` to [`eviction_query`]; `None` where
/// the server does not let us read them (`CONFIG` renamed or disabled on
/// managed Redis, or denied by the user's ACL): refusing there would make
/// the backend unusable on such services, so the caller warns instead.
fn eviction_from(reply: RedisResult<HashMap<String, String>>) -> RedisResult<Option<Eviction>> {
    let settings = match reply {
        Ok(settings) => settings,
        // The server answered with an error: it does not allow CONFIG GET.
        Err(e) if e.code().is_some() => return Ok(None),
        Err(e) => return Err(e),
    };
    let (Some(maxmemory), Some(policy)) =
        (settings.get("maxmemory"), settings.get("maxmemory-policy"))
    else {
        return Ok(None);
    };
    Ok(Some(Eviction {
        maxmemory: maxmemory.parse().unwrap_or(0),
        policy: policy.clone(),
    }))
}

/// Refuses a server at `addr` that may evict keys; warns when its settings
/// are unknown.
fn check_eviction(backend: &str, addr: &str, eviction: Option<Eviction>) -> Result<()> {
    match eviction {
        Some(Eviction { maxmemory, policy }) if maxmemory > 0 && policy != "noeviction" => {
            Err(Error::invalid_config(format!(
                "{backend} at {addr}: maxmemory-policy is {policy} with maxmemory {maxmemory} bytes: when memory runs out the server may evict a held lock's key (volatile-* and allkeys-* policies) or its fencing counter (allkeys-*), letting a second client in; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in the server's configuration file), or use a server without maxmemory"
            )))
        }
        Some(_) => Ok(()),
        None => {
            tracing::warn!(
                backend,
                addr,
                "cannot read maxmemory-policy (CONFIG GET is not allowed here); it must be noeviction, or evicted keys may let a second client in"
            );
            Ok(())
        }
    }
}

fn client_for(backend: &'static str, server: &ServerAddr, common: &CommonConfig) -> Result<Client> {
    let addr = server.to_string();
    let info = connection_info(backend, server, common)?;
    let client = match tls_files(backend, &addr, common)? {
        Some(certificates) => Client::build_with_tls(info, certificates),
        None => Client::open(info),
    };
    client.map_err(|e| {
        let site = Site::new(backend, &addr, "configure the client");
        Error::invalid_config(site.client_error(e).message().to_owned())
    })
}

/// How to reach `server`: address, TLS, credentials and database.
pub(crate) fn connection_info(
    backend: &'static str,
    server: &ServerAddr,
    common: &CommonConfig,
) -> Result<ConnectionInfo> {
    let conn_addr = if common.tls.enabled {
        install_crypto_provider();
        ConnectionAddr::TcpTls {
            host: server.host.clone(),
            port: server.port,
            insecure: common.tls.insecure,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(server.host.clone(), server.port)
    };
    let mut settings = RedisConnectionInfo::default()
        .set_db(common.db)
        .set_lib_name("distlock", env!("CARGO_PKG_VERSION"));
    if let Some(user) = &common.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &common.password {
        settings = settings.set_password(password);
    }
    let info = conn_addr.into_connection_info().map_err(|e| {
        Site::new(backend, &server.to_string(), "configure the client").client_error(e)
    })?;
    Ok(info.set_redis_settings(settings))
}

/// The PEM files TLS is to use instead of the defaults (the system's roots,
/// no client certificate): `tls.ca`, and `tls.cert` with `tls.key`. `None`
/// when TLS is off or none is set.
pub(crate) fn tls_files(
    backend: &str,
    addr: &str,
    common: &CommonConfig,
) -> Result<Option<TlsCertificates>> {
    let tls = &common.tls;
    if !tls.enabled || (tls.files.ca.is_none() && tls.files.cert.is_none()) {
        return Ok(None);
    }
    let read = |setting: &str, path: &Path| {
        std::fs::read(path).map_err(|e| {
            Error::invalid_config(format!(
                "{backend} at {addr}: cannot read {setting} {}: {e}",
                path.display()
            ))
        })
    };
    let root_cert = tls
        .files
        .ca
        .as_deref()
        .map(|p| read("tls.ca", p))
        .transpose()?;
    let client_tls = match (&tls.files.cert, &tls.files.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("tls.cert", cert)?,
            client_key: read("tls.key", key)?,
        }),
        _ => None,
    };
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// rustls needs one process-wide crypto provider; install ring's unless the
/// application already chose one.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use distlock_testkit::servers::RedisServer;

    use crate::{RedisBackend, RedisConfig};

    /// A database number the server does not have is a setting to fix: the
    /// error says which, and keeps the server's reply as its source.
    #[tokio::test]
    async fn a_database_the_server_lacks_is_invalid_config_with_its_source() {
        let server = RedisServer::start()
            .await
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        let url = format!("redis://127.0.0.1:{}/99", server.port());
        let config = RedisConfig::from_url(&url).expect("a well-formed URL");
        let err = RedisBackend::connect(config)
            .await
            .expect_err("database 99 does not exist");
        assert_eq!(err.kind(), distlock_core::ErrorKind::InvalidConfig, "{err}");
        assert!(err.message().contains("databases"), "{err}");
        assert!(!err.message().contains("see the source"), "{err}");
        assert!(std::error::Error::source(&err).is_some(), "{err:#?}");
    }
}
