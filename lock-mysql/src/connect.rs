//! Opening connections: login, session settings, timeouts, TCP keepalives.
//!
//! Every session the backend opens runs in UTC (`time_zone = '+00:00'`, so
//! `DATETIME` arithmetic never crosses a daylight-saving change), at `READ
//! COMMITTED` (every statement reads what has been committed when it runs,
//! and InnoDB takes no gap locks that would make concurrent first inserts
//! of two keys deadlock), and with lock waits bounded well inside the
//! request timeout (`innodb_lock_wait_timeout` for rows, `lock_wait_timeout`
//! for tables), so that a request blocked behind a row lock fails in time
//! and is tried again rather than hang.

use std::time::Duration;

use distlock_core::Result;
use mysql_async::{Conn, Opts, OptsBuilder, PoolConstraints, PoolOpts, SslOpts};

use crate::config::{MysqlConfig, SslMode};
use crate::errors::{from_mysql, timed_out};

/// The session settings of every connection, as `SET` statements.
fn session_settings(config: &MysqlConfig) -> Vec<String> {
    let lock_wait = lock_wait_seconds(config.request_timeout);
    vec![
        format!(
            "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = {lock_wait}, \
             SESSION lock_wait_timeout = {lock_wait}"
        ),
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
    ]
}

/// The row-lock wait bound: half the request timeout, in whole seconds
/// (the servers count them so), at least one.
pub(crate) fn lock_wait_seconds(request_timeout: Duration) -> u64 {
    (request_timeout.as_secs() / 2).max(1)
}

/// The driver's options for `config`: one connection each, or a pool of
/// `config.pool_size` when `pooled`.
pub(crate) fn driver_opts(config: &MysqlConfig, pooled: bool) -> Opts {
    let mut builder = OptsBuilder::default()
        .ip_or_hostname(config.host.clone())
        .tcp_port(config.port)
        .user(Some(config.user().to_owned()))
        .pass(config.password.clone())
        .db_name(config.database.clone())
        .prefer_socket(false)
        .tcp_nodelay(true)
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .client_found_rows(true)
        .stmt_cache_size(64)
        .init(session_settings(config));
    if config.ssl_mode() == SslMode::Required {
        let mut ssl = SslOpts::default();
        if let Some(ca) = &config.tls.ca {
            ssl = ssl.with_root_certs(vec![ca.clone().into()]);
        }
        builder = builder.ssl_opts(Some(ssl));
    }
    if pooled {
        let constraints = PoolConstraints::new(0, config.pool_size.max(1)).unwrap_or_default();
        builder = builder.pool_opts(
            PoolOpts::default()
                .with_constraints(constraints)
                // Nothing the backend does outlives a request on a session,
                // so the reset round trip on every return buys nothing.
                .with_reset_connection(false)
                .with_inactive_connection_ttl(Duration::from_secs(30)),
        );
    }
    builder.into()
}

/// Where `config` points, for messages: `user@host:port/database`.
pub(crate) fn describe(config: &MysqlConfig) -> String {
    format!(
        "{}@{}:{}/{}",
        config.user(),
        config.host,
        config.port,
        config.database.as_deref().unwrap_or("")
    )
}

/// One connection of its own (not pooled), within the connect timeout.
pub(crate) async fn open(config: &MysqlConfig) -> Result<Conn> {
    let context = format!("connect to MySQL at {}", describe(config));
    match tokio::time::timeout(
        config.connect_timeout,
        Conn::new(driver_opts(config, false)),
    )
    .await
    {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(from_mysql(e, &context)),
        Err(_) => Err(timed_out(&context, config.connect_timeout)),
    }
}
