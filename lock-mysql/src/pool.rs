//! A few pooled connections per backend, not one per held lock.
//!
//! Every request of the table layout is one transaction (or one
//! statement) that has its connection to itself until it ends, then gives
//! it back. A connection that broke (a server restart, a killed session)
//! is dropped by the driver and replaced on a later request; one given
//! back mid-request (a cancelled request) is cleaned by the driver, which
//! reads what is left of its answer and rolls back an open transaction, or
//! closes it.

use std::future::Future;

use distlock_core::Result;
use mysql_async::Conn;

use crate::config::MysqlConfig;
use crate::connect::{describe, driver_opts};
use crate::errors::{from_mysql, timed_out};

/// The backend's connections.
#[derive(Debug)]
pub(crate) struct Pool {
    config: MysqlConfig,
    pool: mysql_async::Pool,
}

impl Pool {
    /// A pool of up to `config.pool_size` connections, opened on demand.
    pub(crate) fn new(config: &MysqlConfig) -> Self {
        Pool {
            config: config.clone(),
            pool: mysql_async::Pool::new(driver_opts(config, true)),
        }
    }

    /// A connection, within the connect timeout.
    pub(crate) async fn conn(&self) -> Result<Conn> {
        let context = format!("connect to MySQL at {}", describe(&self.config));
        let bound = self.config.connect_timeout;
        match tokio::time::timeout(bound, self.pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(from_mysql(e, &context)),
            Err(_) => Err(timed_out(&context, bound)),
        }
    }

    /// Runs `request` on a pooled connection within the request timeout;
    /// `context` says what it does, for errors. The request owns the
    /// connection, which goes back to the pool when the request's future
    /// ends or is dropped.
    pub(crate) async fn run<T, F, Fut>(&self, context: &str, request: F) -> Result<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = std::result::Result<T, mysql_async::Error>>,
    {
        let bound = self.config.request_timeout;
        let attempt = async {
            let conn = self.conn().await?;
            request(conn).await.map_err(|e| from_mysql(e, context))
        };
        bounded(bound, context, attempt).await
    }
}

/// `attempt` within `bound`, else `Unavailable` naming `context`.
pub(crate) async fn bounded<T>(
    bound: std::time::Duration,
    context: &str,
    attempt: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(bound, attempt).await {
        Ok(result) => result,
        Err(_) => Err(timed_out(context, bound)),
    }
}
