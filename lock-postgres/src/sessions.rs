//! The advisory layout's sessions: one per held lock, kept for reuse.
//!
//! An advisory lock belongs to the session that took it, so each held lock
//! needs a connection of its own. Opening one costs a TCP and
//! authentication handshake, several times an acquisition itself, so a
//! session whose lock was released cleanly goes back to a small idle pool
//! for the next acquisition instead of closing.
//!
//! A session is put back only when its release proved it holds nothing:
//! it took one advisory lock, and `pg_advisory_unlock` returned true. Any
//! error, timeout,
//! unknown outcome, cancelled release or lost lease drops the session
//! instead, and a dropped session is closed, which frees whatever it held.
//! The pool keeps at most as many sessions as locks were held at once
//! (capped at [`MAX_IDLE`]), and closes those idle for [`IDLE_FOR`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use distlock_core::Result;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use crate::config::PostgresConfig;
use crate::connect::{SERVER_KEEPALIVES, open};

/// The most idle sessions a backend keeps.
const MAX_IDLE: usize = 64;
/// How long a session may stay idle before it is closed.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// One lock's session: its client, and the task that drives its
/// connection. Dropping it ends the session: the connection closes, and a
/// request still in progress is cancelled on the server (in the
/// background), so the session holds nothing afterwards and blocks nobody.
pub(crate) struct Session {
    pub(crate) client: Client,
    driver: JoinHandle<()>,
    config: PostgresConfig,
    /// Counts this session as out of the pool while it is.
    _out: Option<Out>,
    /// No request in flight (the session sits in the pool): closing it
    /// needs no cancel request.
    idle: bool,
    /// Taken from the pool rather than opened for this acquisition.
    pub(crate) reused: bool,
    /// Statements prepared on this session, by their text.
    prepared: Mutex<HashMap<String, Statement>>,
}

/// A parameter with its declared type.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

impl Session {
    /// Runs `sql` as a statement prepared on this session.
    ///
    /// A kept session runs the same few statements again and again; a
    /// prepared one skips the server's parse and plan, which cost about as
    /// much as the lock itself. The first use on a session prepares it (one
    /// more round trip, on a session that has just paid for its connection).
    ///
    /// Cancel safe in the sense the callers need: a cancelled query leaves
    /// the session in use, and callers close a session whose request did not
    /// finish.
    pub(crate) async fn query(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let cached = self.prepared().get(sql).cloned();
        let statement = match cached {
            Some(statement) => statement,
            None => {
                let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
                let statement = self.client.prepare_typed(sql, &types).await?;
                self.prepared().insert(sql.to_owned(), statement.clone());
                statement
            }
        };
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
        self.client.query(&statement, &values).await
    }

    fn prepared(&self) -> MutexGuard<'_, HashMap<String, Statement>> {
        self.prepared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cancels whatever the session's server process is doing.
    pub(crate) fn cancel(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let token = self.client.cancel_token();
        let config = self.config.clone();
        async move {
            if let Ok(tls) = crate::tls::connector(&config) {
                let _ = tokio::time::timeout(config.request_timeout, token.cancel_query(tls)).await;
            }
        }
    }

    /// Ends the session and waits (at most a request timeout) for the
    /// server to have been told to cancel a request in progress.
    pub(crate) async fn close(self) {
        let cancel = self.cancel();
        drop(self);
        cancel.await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
        if !self.idle && !self.client.is_closed() {
            distlock_core::raw::spawn_background(self.cancel());
        }
    }
}

/// Decrements the count of sessions out when dropped.
struct Out(Arc<AtomicUsize>);

impl Drop for Out {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A backend's idle advisory sessions.
pub(crate) struct Sessions {
    config: PostgresConfig,
    idle: Mutex<Vec<(Session, Instant)>>,
    /// Sessions out of the pool (holding or waiting for a lock).
    out: Arc<AtomicUsize>,
    /// The most sessions ever out at once: the pool's bound.
    peak: AtomicUsize,
    /// Weak to itself, for the task that closes idle sessions.
    me: Weak<Sessions>,
    /// Whether that task runs; changed only with `idle` locked.
    reaping: AtomicBool,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("idle", &self.idle().len())
            .field("out", &self.out.load(Ordering::Relaxed))
            .finish()
    }
}

impl Sessions {
    pub(crate) fn new(config: &PostgresConfig) -> Arc<Self> {
        Arc::new_cyclic(|me| Sessions {
            config: config.clone(),
            idle: Mutex::new(Vec::new()),
            out: Arc::new(AtomicUsize::new(0)),
            peak: AtomicUsize::new(0),
            me: me.clone(),
            reaping: AtomicBool::new(false),
        })
    }

    /// A session for one acquisition: the most recently released live one,
    /// or a new connection.
    pub(crate) async fn take(&self) -> Result<Session> {
        let out = self.out.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(out, Ordering::Relaxed);
        let counted = Out(self.out.clone());
        if let Some(mut session) = self.pop_live() {
            session._out = Some(counted);
            session.idle = false;
            session.reused = true;
            return Ok(session);
        }
        self.connect(counted).await
    }

    /// A session on a new connection, never a kept one.
    pub(crate) async fn open(&self) -> Result<Session> {
        let out = self.out.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(out, Ordering::Relaxed);
        self.connect(Out(self.out.clone())).await
    }

    /// A new session whose server side probes the connection as the
    /// client does, so that the server frees the locks of a holder that
    /// vanished within about 45 s rather than its own default.
    async fn connect(&self, counted: Out) -> Result<Session> {
        let (client, connection) = open(&self.config).await?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let context = "set the advisory session's server-side TCP keepalives";
        match tokio::time::timeout(
            self.config.request_timeout,
            client.batch_execute(SERVER_KEEPALIVES),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(crate::errors::from_pg(e, context)),
            Err(_) => {
                return Err(crate::errors::timed_out(
                    context,
                    self.config.request_timeout,
                ));
            }
        }
        Ok(Session {
            client,
            driver,
            config: self.config.clone(),
            _out: Some(counted),
            idle: false,
            reused: false,
            prepared: Mutex::new(HashMap::new()),
        })
    }

    /// Keeps a session that holds nothing for the next acquisition.
    ///
    /// Only for a session whose last request proved it holds no advisory
    /// lock and that has no request in flight.
    pub(crate) fn put(&self, mut session: Session) {
        session._out = None;
        session.idle = true;
        if session.client.is_closed() {
            return;
        }
        let bound = self.peak.load(Ordering::Relaxed).clamp(1, MAX_IDLE);
        let mut idle = self.idle();
        prune(&mut idle);
        if idle.len() >= bound {
            return;
        }
        idle.push((session, Instant::now()));
        if !self.reaping.swap(true, Ordering::Relaxed) && !self.start_reaper() {
            self.reaping.store(false, Ordering::Relaxed);
        }
    }

    fn pop_live(&self) -> Option<Session> {
        let mut idle = self.idle();
        prune(&mut idle);
        while let Some((session, _)) = idle.pop() {
            if !session.client.is_closed() {
                return Some(session);
            }
        }
        None
    }

    /// Closes idle sessions once they have been idle for [`IDLE_FOR`],
    /// until none is left.
    fn start_reaper(&self) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let me = self.me.clone();
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(IDLE_FOR).await;
                let Some(sessions) = me.upgrade() else {
                    return;
                };
                let mut idle = sessions.idle();
                prune(&mut idle);
                if idle.is_empty() {
                    sessions.reaping.store(false, Ordering::Relaxed);
                    return;
                }
            }
        });
        true
    }

    fn idle(&self) -> MutexGuard<'_, Vec<(Session, Instant)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops the sessions idle for [`IDLE_FOR`] or closed.
fn prune(idle: &mut Vec<(Session, Instant)>) {
    let now = Instant::now();
    idle.retain(|(session, since)| {
        !session.client.is_closed() && now.duration_since(*since) < IDLE_FOR
    });
}
