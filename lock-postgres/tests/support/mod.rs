//! Shared helpers of the distlock-postgres tests: a real server from the test
//! kit and backends pointed at it.

#![allow(dead_code, unreachable_pub)]

use distlock_postgres::ClientConfig;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockGuard};
use distlock_postgres::tokio_postgres::{self, Client, NoTls};
use distlock_postgres::{PostgresBackend, PostgresConfig};
use distlock_testkit::conformance::Target;
use distlock_testkit::servers::PostgresServer;

/// The lease TTL of the tests: short, so expiry tests are quick, and long
/// enough that renewal every TTL/3 keeps up on a busy two-core machine.
pub const TTL: Duration = Duration::from_millis(1000);

/// Starts a server; a missing binary fails naming scripts/install-servers.sh.
pub async fn start_postgres() -> PostgresServer {
    PostgresServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start postgres: {e}"))
}

/// The config of a test client of `server`.
pub fn config_for(server: &PostgresServer) -> PostgresConfig {
    PostgresConfig::from_url(&server.authenticated_url())
        .expect("the server's URL")
        .with_ttl(TTL)
        .with_connect_timeout(Duration::from_secs(3))
        .with_request_timeout(Duration::from_secs(2))
}

/// A new, independent client of `server`.
pub async fn client(server: &PostgresServer) -> PostgresBackend {
    PostgresBackend::connect(config_for(server))
        .await
        .expect("connect to postgres")
}

/// A plain driver connection to `server`, for test SQL.
pub async fn sql_client(server: &PostgresServer) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.authenticated_url(), NoTls)
        .await
        .expect("connect with tokio-postgres");
    tokio::spawn(connection);
    client
}

/// Ends `guard`'s lease on the server as expiry would: its row's expiry
/// is set to the server's now.
pub async fn expire(server: &PostgresServer, guard: &LockGuard) {
    let client = sql_client(server).await;
    let token = i64::try_from(guard.token().get()).expect("token fits");
    let ended = client
        .execute(
            "UPDATE distlock.entries SET expires_at = clock_timestamp() \
             WHERE key = $1 AND token = $2",
            &[&guard.key(), &token],
        )
        .await
        .expect("expire the lease");
    assert_eq!(ended, 1, "no entry for {} token {}", guard.key(), token);
}

/// The conformance target: one server per test, each client its own
/// backend with its own connections, as a separate process would have.
pub struct PostgresTarget {
    pub server: PostgresServer,
}

impl PostgresTarget {
    /// Starts the server.
    pub async fn start() -> Self {
        PostgresTarget {
            server: start_postgres().await,
        }
    }
}

#[async_trait]
impl Target for PostgresTarget {
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

/// The advisory lock key of a guard of the advisory layout (`advisory:KEY`).
pub fn advisory_key(guard: &LockGuard) -> i64 {
    guard
        .key()
        .strip_prefix("advisory:")
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("not an advisory key: {}", guard.key()))
}

/// Ends the session that holds `guard`'s advisory lock, as a server
/// restart or an operator's `pg_terminate_backend` would.
pub async fn terminate_holder(server: &PostgresServer, guard: &LockGuard) {
    let client = sql_client(server).await;
    let ended: i64 = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
               AND ((classid::bigint << 32) | objid::bigint) = $1",
            &[&advisory_key(guard)],
        )
        .await
        .expect("terminate the holder")
        .get(0);
    assert_eq!(ended, 1, "no session holds {}", guard.key());
}

/// The conformance target of the advisory layout.
pub struct AdvisoryTarget {
    pub server: PostgresServer,
}

impl AdvisoryTarget {
    /// Starts the server.
    pub async fn start() -> Self {
        AdvisoryTarget {
            server: start_postgres().await,
        }
    }
}

/// A new client of `server` with the advisory layout.
pub async fn advisory_client(server: &PostgresServer) -> PostgresBackend {
    PostgresBackend::connect(config_for(server).with_layout(distlock_postgres::Layout::Advisory))
        .await
        .expect("connect to postgres")
}

#[async_trait]
impl Target for AdvisoryTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        Arc::new(advisory_client(&self.server).await)
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn kill_lease(&self, guard: &LockGuard) {
        terminate_holder(&self.server, guard).await;
    }
}
