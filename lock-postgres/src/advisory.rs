//! The `advisory` layout: a lock is a session advisory lock
//! (`pg_advisory_lock`), shared with any other client that takes the same
//! key, such as `psql` or another application.
//!
//! A name that is a decimal `i64` is the key itself; any other name (with
//! the prefix before it) is hashed by the server's `hashtextextended(text,
//! 0)`, which any client can call too. Each held lock has a connection of
//! its own, since the lock belongs to the session: the session *is* the
//! lease. Tokens still come from the `tokens` sequence, taken on the lock's
//! connection once the lock is granted, so they rise across the holders
//! that use this crate (other clients take none).
//!
//! Giving up a wait never races a late grant: the waiting session is
//! cancelled and its connection closed, and a closed session holds nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{Grant, Lease, LossNotifier, SentAt};
use lock_core::{AcquireOptions, Error, LockGuard, LockName, LostReason, Result, Wait};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::backend::PostgresBackend;
use crate::config::PostgresConfig;
use crate::connect::open;

/// The advisory lock key of `name` under `prefix`, as the SQL that computes
/// it on the server with its parameters: a decimal `i64` name is the key.
fn key_param(prefix: &str, name: &LockName) -> (Option<i64>, String) {
    (name.as_str().parse::<i64>().ok(), format!("{prefix}{name}"))
}

/// SQL for the key: `$1` the decimal key if any, `$2` the text to hash.
const KEY: &str = "coalesce($1::bigint, hashtextextended($2::text, 0))";

/// One lock's session: its client, and the task that drives its
/// connection. Dropping it ends the session: the connection closes, and a
/// wait still in progress is cancelled on the server (in the background),
/// so the session holds nothing afterwards and blocks nobody.
struct Session {
    client: Client,
    driver: JoinHandle<()>,
    config: PostgresConfig,
}

impl Session {
    async fn open(backend: &PostgresBackend) -> Result<Self> {
        let config = backend.inner.config.clone();
        let (client, connection) = open(&config).await?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Session {
            client,
            driver,
            config,
        })
    }

    /// Ends the session and waits (at most a request timeout) for the
    /// server to have been told to cancel a wait in progress.
    async fn close(self, _config: &PostgresConfig) {
        let cancel = self.cancel();
        drop(self);
        cancel.await;
    }

    /// Cancels whatever the session's server process is doing.
    fn cancel(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let token = self.client.cancel_token();
        let config = self.config.clone();
        async move {
            if let Ok(tls) = crate::tls::connector(&config) {
                let _ = tokio::time::timeout(config.request_timeout, token.cancel_query(tls)).await;
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
        if !self.client.is_closed() {
            lock_core::raw::spawn_background(self.cancel());
        }
    }
}

impl PostgresBackend {
    /// Takes the advisory lock of `name`.
    pub(crate) async fn acquire_advisory(
        &self,
        name: &LockName,
        options: &AcquireOptions,
    ) -> Result<LockGuard> {
        let config = &self.inner.config;
        let ttl = options.ttl_for(config.ttl, &lock_core::LockBackend::capabilities(self))?;
        crate::config::check_ttl(ttl)?;
        let (decimal, text) = key_param(&config.prefix, name);
        let deadline = options.wait.deadline_from(Instant::now());
        let session = Session::open(self).await?;
        let bound = config.request_timeout;
        let statement = match options.wait {
            Wait::No => format!("SELECT pg_try_advisory_lock({KEY}), {KEY}"),
            // `pg_advisory_lock` returns `void`: a row means granted.
            _ => format!(
                "WITH granted AS MATERIALIZED (SELECT pg_advisory_lock({KEY})) \
                 SELECT true, {KEY} FROM granted"
            ),
        };
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
            [(&decimal, Type::INT8), (&text, Type::TEXT)];
        let request = session.client.query_typed(&statement, &params);
        let answer = match (options.wait, deadline) {
            (Wait::Forever, _) | (_, None) => Ok(request.await),
            (Wait::No, _) => tokio::time::timeout(bound, request).await,
            (_, Some(deadline)) => tokio::time::timeout_at(deadline, request).await,
        };
        let rows = match answer {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                session.close(config).await;
                return Err(crate::errors::from_pg(e, &format!("lock {name}")));
            }
            Err(_) => {
                session.close(config).await;
                return Err(match options.wait {
                    Wait::No => crate::errors::timed_out(&format!("lock {name}"), bound),
                    _ => Error::timeout(format!(
                        "advisory lock {name} is still held by someone else after the wait"
                    )),
                });
            }
        };
        // The session is the lease: it has no server-side expiry, so its
        // validity (checked by renewal) counts from the grant, not from a
        // wait that may have been long.
        let sent = SentAt::now();
        let granted: bool = rows.first().is_some_and(|row| row.get(0));
        let key: i64 = rows.first().map_or(0, |row| row.get(1));
        if !granted {
            session.close(config).await;
            return Err(Error::would_block(format!(
                "advisory lock {name} (key {key}) is held by someone else"
            )));
        }
        let next = format!("SELECT nextval('{}.tokens')", config.schema);
        let token = match tokio::time::timeout(bound, session.client.query_typed(&next, &[])).await
        {
            Ok(Ok(rows)) => rows.first().map_or(0, |row| row.get::<_, i64>(0)),
            Ok(Err(e)) => {
                session.close(config).await;
                return Err(crate::errors::from_pg(
                    e,
                    &format!("take a token for {name}"),
                ));
            }
            Err(_) => {
                session.close(config).await;
                return Err(crate::errors::timed_out(
                    &format!("take a token for {name}"),
                    bound,
                ));
            }
        };
        let notifier = LossNotifier::new();
        let unsigned = u64::try_from(token)
            .map_err(|_| Error::backend(format!("{name}: negative token {token}")))?;
        let grant = Grant::new(name.clone(), unsigned, format!("advisory:{key}"), ttl, sent)
            .with_notifier(notifier.clone())
            .renewed_by(&self.inner.renewer);
        lock_core::raw::leased_guard(
            grant,
            AdvisoryLease {
                session: Arc::new(session),
                key,
                name: name.clone(),
                bound,
                notifier,
            },
        )
    }
}

/// A held advisory lock: its session.
struct AdvisoryLease {
    session: Arc<Session>,
    key: i64,
    name: LockName,
    bound: Duration,
    notifier: LossNotifier,
}

impl fmt::Debug for AdvisoryLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvisoryLease")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish()
    }
}

impl AdvisoryLease {
    fn gone(&self, why: &str) -> Error {
        Error::lease_lost(format!(
            "advisory lock {} (key {}) is no longer held: {why}",
            self.name, self.key
        ))
    }
}

#[async_trait]
impl Lease for AdvisoryLease {
    /// Checks that the session still holds the lock: the session is the
    /// lease, so a closed connection means the lock is gone.
    async fn renew(&self) -> Result<()> {
        let check = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                     AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
                     AND ((classid::bigint << 32) | objid::bigint) = $1)";
        let key = self.key;
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] = [(&key, Type::INT8)];
        let asked = self.session.client.query_typed(check, &params);
        match tokio::time::timeout(self.bound, asked).await {
            Ok(Ok(rows)) if rows.first().is_some_and(|row| row.get::<_, bool>(0)) => Ok(()),
            Ok(Ok(_)) => {
                self.notifier.fire(LostReason::Revoked);
                Err(self.gone("the session no longer holds it"))
            }
            Ok(Err(e)) if e.is_closed() || e.code().is_some() => {
                // The session ended (terminated, or the server restarted).
                self.notifier.fire(LostReason::Revoked);
                Err(self.gone(&format!("its session ended ({e})")))
            }
            Ok(Err(e)) => Err(crate::errors::from_pg(e, "check an advisory lock")),
            Err(_) => Err(crate::errors::timed_out(
                "check an advisory lock",
                self.bound,
            )),
        }
    }

    async fn release(&self) -> Result<()> {
        let unlock = "SELECT pg_advisory_unlock($1)";
        let key = self.key;
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] = [(&key, Type::INT8)];
        let asked = self.session.client.query_typed(unlock, &params);
        let result = match tokio::time::timeout(self.bound, asked).await {
            Ok(Ok(rows)) if rows.first().is_some_and(|row| row.get::<_, bool>(0)) => Ok(()),
            Ok(Ok(_)) => Err(self.gone("the session did not hold it")),
            Ok(Err(e)) if e.is_closed() || e.code().is_some() => {
                Err(self.gone(&format!("its session ended ({e})")))
            }
            Ok(Err(e)) => Err(crate::errors::from_pg(e, "release an advisory lock")),
            // Unknown: the session is closed below, which frees it anyway.
            Err(_) => Err(crate::errors::timed_out(
                "release an advisory lock",
                self.bound,
            )),
        };
        self.session.driver.abort();
        result
    }

    fn release_blocking(&self) {
        // Closing the connection ends the session and frees the lock.
        self.session.driver.abort();
    }
}
