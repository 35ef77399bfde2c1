//! Opening one connection: login, timeouts, TCP keepalives.
//!
//! Keepalives let the server notice a vanished client within about a
//! minute even though leases never depend on it (rows expire by the server
//! clock): it frees the dead session's resources sooner.

use std::time::Duration;

use lock_core::Result;
use tokio_postgres::{Client, Config, NoTls};

use crate::config::PostgresConfig;
use crate::errors::{from_pg, timed_out};

/// The driver's configuration for `config`.
fn driver_config(config: &PostgresConfig) -> Config {
    let mut pg = Config::new();
    pg.host(&config.host)
        .port(config.port)
        .user(&config.username)
        .dbname(&config.database)
        .application_name("distlock")
        .connect_timeout(config.connect_timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3);
    if let Some(password) = &config.password {
        pg.password(password);
    }
    pg
}

/// Where `config` points, for messages: `user@host:port/database`.
pub(crate) fn describe(config: &PostgresConfig) -> String {
    format!(
        "{}@{}:{}/{}",
        config.username, config.host, config.port, config.database
    )
}

/// A connection whose driver runs as a task on the current runtime, and
/// that task, which ends when the connection does.
pub(crate) async fn open(
    config: &PostgresConfig,
) -> Result<(
    Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
)> {
    let context = format!("connect to PostgreSQL at {}", describe(config));
    let driver = driver_config(config);
    let connecting = driver.connect(NoTls);
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
