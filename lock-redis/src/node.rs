//! One Redis server as a backend instance sees it: a self-healing command
//! connection, a pub/sub connection for wake-ups, and timeouts on every call.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Once};
use std::time::Duration;

use lock_core::{Error, ErrorKind, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, FromRedisValue, IntoConnectionInfo,
    RedisConnectionInfo, Script, TlsCertificates,
};
use tokio::time::timeout;

use crate::config::{CommonConfig, ServerAddr};
use lock_core::raw::Site;

use crate::errors::RedisSite;
use crate::scripts::SCRIPTS;
use crate::wakeups::{Link, WakeTask, Wakeups};

/// One server: commands go through `conn`, wake-ups arrive on `wakeups`.
#[derive(Clone)]
pub(crate) struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    addr: String,
    backend: &'static str,
    client: Client,
    conn: ConnectionManager,
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
    /// Sets up the connections without waiting for them; [`Node::probe`]
    /// checks that the server is reachable and accepts our credentials.
    pub(crate) fn new(
        backend: &'static str,
        server: &ServerAddr,
        common: &CommonConfig,
        instance_channel: String,
    ) -> Result<Node> {
        let addr = server.to_string();
        let client = client_for(backend, server, common)?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(common.connect_timeout))
            .set_response_timeout(Some(common.request_timeout))
            // One connection attempt per reconnection: a dead server must
            // fail fast (Redlock carries on with the others); the next
            // command tries again.
            .set_number_of_retries(0);
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), manager).map_err(|e| {
                Site {
                    backend,
                    address: &addr,
                    operation: "set up the connection",
                }
                .client_error(e)
            })?;
        let (wakeups, wake_task) = Wakeups::start(
            client.clone(),
            addr.clone(),
            instance_channel,
            common.connect_timeout,
            common.request_timeout,
        );
        Ok(Node {
            inner: Arc::new(NodeInner {
                addr,
                backend,
                client,
                conn,
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
        let site = Site {
            backend: inner.backend,
            address: &inner.addr,
            operation: "connect",
        };
        let started = tokio::time::Instant::now();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(inner.connect_timeout))
            .set_response_timeout(Some(inner.connect_timeout));
        let probe = async {
            let mut conn = inner
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            // Load the scripts now, so the first lock operations do not pay
            // a NOSCRIPT round trip. After a server restart they are
            // reloaded on first use.
            for script in SCRIPTS.all() {
                script.load_async(&mut conn).await?;
            }
            eviction_settings(&mut conn).await
        };
        match timeout(inner.connect_timeout, probe).await {
            Err(_) => return Err(site.unreachable(inner.connect_timeout)),
            Ok(Err(e)) => {
                let detail = e.to_string();
                let mut err = site.client_error(e);
                if detail.contains("DB index") {
                    err = Error::invalid_config(err.message().to_owned());
                } else if err.kind() == ErrorKind::Timeout {
                    err = site.unreachable(inner.connect_timeout);
                }
                return Err(err);
            }
            Ok(Ok(Some(Eviction { maxmemory, policy })))
                if maxmemory > 0 && policy != "noeviction" =>
            {
                return Err(Error::invalid_config(format!(
                    "{} at {}: maxmemory-policy is {policy} with maxmemory {maxmemory} bytes: when memory runs out the server may evict a held lock's key (volatile-* and allkeys-* policies) or its fencing counter (allkeys-*), letting a second client in; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in the server's configuration file), or use a server without maxmemory",
                    inner.backend, inner.addr
                )));
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => tracing::warn!(
                backend = inner.backend,
                addr = %inner.addr,
                "cannot read maxmemory-policy (CONFIG GET is not allowed here); it must be noeviction, or evicted keys may let a second client in"
            ),
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

    /// `host:port`, for messages.
    pub(crate) fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The backend name (`redis` or `redlock`), for messages.
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
        let mut conn = inner
            .client
            .get_connection_with_timeout(inner.connect_timeout)?;
        conn.set_read_timeout(Some(inner.request_timeout))?;
        conn.set_write_timeout(Some(inner.request_timeout))?;
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        invocation.invoke(&mut conn)
    }

    /// Runs `script` with `keys` and `args` within the request timeout.
    /// `what` names the operation in errors ("releasing lock x").
    ///
    /// The arguments are copied before the returned future starts, so it
    /// borrows nothing.
    pub(crate) fn eval<T: FromRedisValue + Send + 'static>(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[&[u8]],
        what: &str,
    ) -> impl Future<Output = Result<T>> + Send + 'static + use<T> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let inner = self.inner.clone();
        let what = what.to_owned();
        async move {
            let site = Site {
                backend: inner.backend,
                address: &inner.addr,
                operation: &what,
            };
            let mut conn = inner.conn.clone();
            match timeout(
                inner.request_timeout,
                invocation.invoke_async::<T>(&mut conn),
            )
            .await
            {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => Err(site.client_error(e)),
                Err(_) => Err(site.timed_out(inner.request_timeout)),
            }
        }
    }
}

impl Node {
    /// Every key matching `pattern`: `SCAN` with `MATCH`, page after page
    /// (`COUNT` 1000), each page within the request timeout. Costs one
    /// round trip per 1000 keys of the whole database.
    pub(crate) async fn scan(&self, pattern: &str, what: &str) -> Result<Vec<Vec<u8>>> {
        let inner = &self.inner;
        let site = Site {
            backend: inner.backend,
            address: &inner.addr,
            operation: what,
        };
        let mut conn = inner.conn.clone();
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let page = scan.query_async::<(u64, Vec<Vec<u8>>)>(&mut conn);
            let (next, found) = match timeout(inner.request_timeout, page).await {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => return Err(site.client_error(e)),
                Err(_) => return Err(site.timed_out(inner.request_timeout)),
            };
            keys.extend(found);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

/// The server's eviction settings.
struct Eviction {
    /// Bytes; 0 means no limit, so nothing is evicted.
    maxmemory: u64,
    policy: String,
}

/// Reads `maxmemory` and `maxmemory-policy`; `None` where the server does
/// not let us (`CONFIG` renamed or disabled on managed Redis, or denied by
/// the user's ACL): refusing there would make the backend unusable on such
/// services, so the caller warns instead.
async fn eviction_settings(
    conn: &mut redis::aio::MultiplexedConnection,
) -> redis::RedisResult<Option<Eviction>> {
    let reply = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory*")
        .query_async::<HashMap<String, String>>(conn)
        .await;
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

fn client_for(backend: &'static str, server: &ServerAddr, common: &CommonConfig) -> Result<Client> {
    let addr = server.to_string();
    let site = Site {
        backend,
        address: &addr,
        operation: "configure the client",
    };
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
    let info = conn_addr
        .into_connection_info()
        .map_err(|e| site.client_error(e))?
        .set_redis_settings(settings);
    let client = match &common.tls.ca_file {
        Some(path) if common.tls.enabled => {
            let pem = std::fs::read(path).map_err(|e| {
                Error::invalid_config(format!(
                    "{backend} at {addr}: cannot read tls_ca_file {}: {e}",
                    path.display()
                ))
            })?;
            Client::build_with_tls(
                info,
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            )
        }
        _ => Client::open(info),
    };
    client.map_err(|e| {
        let err = site.client_error(e);
        Error::invalid_config(err.message().to_owned())
    })
}

/// rustls needs one process-wide crypto provider; install ring's unless the
/// application already chose one.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
