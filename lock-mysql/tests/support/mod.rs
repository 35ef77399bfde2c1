//! Shared helpers of the distlock-mysql tests: a real MariaDB from the
//! test kit and backends pointed at it.

#![allow(dead_code, unreachable_pub)]

use distlock_mysql::ClientConfig;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockGuard};
use distlock_mysql::mysql_async::{self, Conn, prelude::Queryable};
use distlock_mysql::{Layout, MysqlBackend, MysqlConfig};
use distlock_testkit::conformance::Target;
use distlock_testkit::servers::MariadbServer;

/// The lease TTL of the tests: short, so expiry tests are quick, and long
/// enough that renewal every TTL/3 keeps up on a busy two-core machine.
pub const TTL: Duration = Duration::from_millis(1000);

/// Starts a server; missing binaries fail naming scripts/install-servers.sh.
pub async fn start_mariadb() -> MariadbServer {
    MariadbServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start mariadb: {e}"))
}

/// The config of a test client of `server`.
pub fn config_for(server: &MariadbServer) -> MysqlConfig {
    MysqlConfig::from_url(&server.url())
        .expect("the server's URL")
        .with_ttl(TTL)
        .with_connect_timeout(Duration::from_secs(3))
        .with_request_timeout(Duration::from_secs(2))
}

/// A new, independent client of `server`.
pub async fn client(server: &MariadbServer) -> MysqlBackend {
    MysqlBackend::connect(config_for(server))
        .await
        .expect("connect to mariadb")
}

/// A new client of `server` with the named layout.
pub async fn named_client(server: &MariadbServer) -> MysqlBackend {
    MysqlBackend::connect(config_for(server).with_layout(Layout::Named))
        .await
        .expect("connect to mariadb")
}

/// A plain driver connection to `server`, for test SQL.
pub async fn sql_client(server: &MariadbServer) -> Conn {
    Conn::from_url(server.url())
        .await
        .expect("connect with mysql_async")
}

/// Ends `guard`'s lease on the server as expiry would: its row's expiry
/// is set to the server's now.
pub async fn expire(server: &MariadbServer, guard: &LockGuard) {
    let mut conn = sql_client(server).await;
    conn.exec_drop(
        "UPDATE distlock_entries SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 MICROSECOND \
         WHERE k = ? AND token = ?",
        (guard.key().as_bytes(), guard.token().get()),
    )
    .await
    .expect("expire the lease");
    assert_eq!(
        conn.affected_rows(),
        1,
        "no entry for {} token {}",
        guard.key(),
        guard.token()
    );
}

/// The server-side name of a guard of the named layout (`named:NAME`).
pub fn named_lock(guard: &LockGuard) -> String {
    guard
        .key()
        .strip_prefix("named:")
        .unwrap_or_else(|| panic!("not a named lock: {}", guard.key()))
        .to_owned()
}

/// Ends the session that holds `guard`'s named lock, as a server restart
/// or an operator's `KILL` would.
pub async fn kill_holder(server: &MariadbServer, guard: &LockGuard) {
    let mut conn = sql_client(server).await;
    let holder: Option<Option<u64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (named_lock(guard),))
        .await
        .expect("find the holder");
    let id = holder
        .flatten()
        .unwrap_or_else(|| panic!("no session holds {}", guard.key()));
    conn.query_drop(format!("KILL CONNECTION {id}"))
        .await
        .expect("kill the holder");
}

/// The conformance target: one server per test, each client its own
/// backend with its own connections, as a separate process would have.
pub struct MysqlTarget {
    pub server: MariadbServer,
}

impl MysqlTarget {
    /// Starts the server.
    pub async fn start() -> Self {
        MysqlTarget {
            server: start_mariadb().await,
        }
    }
}

#[async_trait]
impl Target for MysqlTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(client(&self.server).await)
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        expire(&self.server, guard).await;
    }
}

/// The conformance target of the named layout.
pub struct NamedTarget {
    pub server: MariadbServer,
}

impl NamedTarget {
    /// Starts the server.
    pub async fn start() -> Self {
        NamedTarget {
            server: start_mariadb().await,
        }
    }
}

#[async_trait]
impl Target for NamedTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(named_client(&self.server).await)
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        kill_holder(&self.server, guard).await;
    }
}

/// Keeps `mysql_async` in scope for tests that name its types.
pub type Driver = mysql_async::Error;
