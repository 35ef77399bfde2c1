//! Opening one connection: login, timeouts, TCP keepalives.
//!
//! Keepalives let the server notice a vanished client within about a
//! minute even though leases never depend on it (rows expire by the server
//! clock): it frees the dead session's resources sooner.

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
        .keepalives_idle(Duration::from_secs(30))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3);
    pg.ssl_mode(match config.sslmode {
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
