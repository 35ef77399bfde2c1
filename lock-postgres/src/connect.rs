//! Opening one connection: login, timeouts, TCP keepalives.
//!
//! The client's keepalives let it notice a vanished server or a cut
//! connection within about 45 s (30 s idle, then 3 probes 5 s apart). The
//! server's side of the same connection follows the server's own
//! `tcp_keepalives_*` settings (often the kernel's two hours), which a
//! session can set for itself: the advisory layout's sessions, whose locks
//! end with them, set the same values ([`SERVER_KEEPALIVES`]), so that the
//! server frees a vanished holder's advisory locks within about 45 s. The
//! table layout's leases never depend on either: rows expire by the server
//! clock.

use std::time::Duration;

use distlock_core::Result;
use tokio_postgres::config::SslMode as DriverSslMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The stream type of a connection that may use TLS.
type TlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

use crate::config::{PostgresConfig, SslMode};
use crate::errors::{from_pg, timed_out};

/// Idle time before the first keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Probes unanswered before the connection counts as dead.
const KEEPALIVE_PROBES: u32 = 3;

/// The statement that gives a session's server side the client's
/// keepalives.
pub(crate) const SERVER_KEEPALIVES: &str =
    "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3";

/// The driver's configuration for `config`.
fn driver_config(config: &PostgresConfig) -> Config {
    let mut pg = Config::new();
    pg.host(&config.host)
        .port(config.port)
        .user(config.user())
        .dbname(&config.database)
        .application_name("distlock")
        .connect_timeout(config.connect_timeout)
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_PROBES);
    pg.ssl_mode(match config.sslmode() {
        SslMode::Disable => DriverSslMode::Disable,
        SslMode::Prefer => DriverSslMode::Prefer,
        SslMode::Require => DriverSslMode::Require,
    });
    if let Some(password) = &config.password {
        pg.password(password);
    }
    pg
}

/// Where `config` points, for messages: `user@host:port/database`.
pub(crate) fn describe(config: &PostgresConfig) -> String {
    format!(
        "{}@{}:{}/{}",
        config.user(),
        config.host,
        config.port,
        config.database
    )
}

/// A connection whose driver runs as a task on the current runtime, and
/// that task, which ends when the connection does.
pub(crate) async fn open(
    config: &PostgresConfig,
) -> Result<(Client, Connection<Socket, TlsStream>)> {
    let context = format!("connect to PostgreSQL at {}", describe(config));
    let driver = driver_config(config);
    let tls: MakeRustlsConnect = crate::tls::connector(config)?;
    let connecting = driver.connect(tls);
    match tokio::time::timeout(config.connect_timeout, connecting).await {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(e)) => Err(from_pg(e, &context)),
        Err(_) => Err(timed_out(&context, config.connect_timeout)),
    }
}

/// A connection for requests, its driver spawned on the current runtime.
pub(crate) async fn open_client(config: &PostgresConfig) -> Result<Client> {
    let (client, connection) = open(config).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended");
        }
    });
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_side_keepalives_match_the_client_side() {
        let expected = format!(
            "SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
             SET tcp_keepalives_count = {KEEPALIVE_PROBES}",
            KEEPALIVE_IDLE.as_secs(),
            KEEPALIVE_INTERVAL.as_secs()
        );
        assert_eq!(SERVER_KEEPALIVES, expected);
    }
}
