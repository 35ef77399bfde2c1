//! The named layout's sessions: one per held lock, kept for reuse.
//!
//! A named lock belongs to the session that took it, so each held lock
//! needs a connection of its own. Opening one costs a TCP and
//! authentication handshake, several times an acquisition itself, so a
//! session whose lock was released cleanly (`RELEASE_LOCK` returned 1, and
//! a session takes one lock at a time) goes back to a small idle pool for
//! the next acquisition instead of closing.
//!
//! The table layout borrows sessions of the same pool for its wake signal
//! (see [`crate::wake`]), at most [`MAX_LENT`] at once, so that a process
//! holding many locks opens no more connections than that for them.
//!
//! A session dropped while a request may be in flight (a cancelled or
//! timed-out wait, an unknown outcome) is ended with `KILL CONNECTION` from
//! another connection, in the background: the driver would otherwise wait
//! for the blocked `GET_LOCK` to answer before it closes the socket, and a
//! killed session holds nothing.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use distlock_core::Result;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::config::MysqlConfig;

/// The most idle sessions a backend keeps.
const MAX_IDLE: usize = 64;
/// The most sessions lent to the wake signal at once.
pub(crate) const MAX_LENT: usize = 32;
/// How long a session may stay idle before it is closed.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// One lock's session.
pub(crate) struct Session {
    conn: Option<Conn>,
    /// The server's id of the session, for `KILL CONNECTION`.
    pub(crate) id: u32,
    /// A request may be in flight: ending the session needs a kill.
    busy: bool,
    killer: mysql_async::Pool,
    /// Taken from the idle pool rather than opened for this acquisition.
    pub(crate) reused: bool,
    /// Counts the session against [`MAX_LENT`] while it is lent.
    lent: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

impl Session {
    /// The connection, marked busy until [`Session::settled`].
    pub(crate) fn conn(&mut self) -> &mut Conn {
        self.busy = true;
        self.conn
            .as_mut()
            .expect("a session has its connection until dropped")
    }

    /// The last request finished: no kill is needed to end the session.
    pub(crate) fn settled(&mut self) {
        self.busy = false;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.busy {
            let (killer, id) = (self.killer.clone(), self.id);
            distlock_core::raw::spawn_background(async move {
                if let Ok(Ok(mut conn)) =
                    tokio::time::timeout(Duration::from_secs(5), killer.get_conn()).await
                {
                    let kill = conn.query_drop(format!("KILL CONNECTION {id}"));
                    let _ = tokio::time::timeout(Duration::from_secs(5), kill).await;
                }
            });
        }
    }
}

/// A backend's idle named-lock sessions.
pub(crate) struct Sessions {
    config: MysqlConfig,
    idle: Mutex<Vec<(Session, Instant)>>,
    killer: mysql_async::Pool,
    lendable: Arc<Semaphore>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("idle", &self.idle().len())
            .finish()
    }
}

impl Sessions {
    pub(crate) fn new(config: &MysqlConfig) -> Arc<Self> {
        let mut killer_config = config.clone();
        killer_config.pool_size = 1;
        Arc::new(Sessions {
            config: config.clone(),
            idle: Mutex::new(Vec::new()),
            killer: mysql_async::Pool::new(crate::connect::driver_opts(&killer_config, true)),
            lendable: Arc::new(Semaphore::new(MAX_LENT)),
        })
    }

    /// A session for one acquisition: the most recently released one that
    /// has not been idle too long, or a new connection.
    pub(crate) async fn take(&self) -> Result<Session> {
        if let Some(mut session) = self.pop() {
            session.reused = true;
            return Ok(session);
        }
        self.open().await
    }

    /// A session lent to the wake signal, as [`Sessions::take`]; `None`
    /// when [`MAX_LENT`] are lent already.
    pub(crate) async fn lend(&self) -> Option<Result<Session>> {
        let permit = self.lendable.clone().try_acquire_owned().ok()?;
        Some(self.take().await.map(|mut session| {
            session.lent = Some(permit);
            session
        }))
    }

    /// A session on a new connection, never a kept one.
    pub(crate) async fn open(&self) -> Result<Session> {
        let conn = crate::connect::open(&self.config).await?;
        Ok(Session {
            id: conn.id(),
            conn: Some(conn),
            busy: false,
            killer: self.killer.clone(),
            reused: false,
            lent: None,
        })
    }

    /// Keeps a session that holds nothing for the next acquisition: only
    /// for one whose last request proved it holds no named lock and that
    /// has no request in flight.
    pub(crate) fn put(&self, mut session: Session) {
        session.busy = false;
        session.lent = None;
        let mut idle = self.idle();
        let now = Instant::now();
        idle.retain(|(_, since)| now.duration_since(*since) < IDLE_FOR);
        if idle.len() < MAX_IDLE {
            idle.push((session, now));
        }
    }

    fn pop(&self) -> Option<Session> {
        let mut idle = self.idle();
        let now = Instant::now();
        idle.retain(|(_, since)| now.duration_since(*since) < IDLE_FOR);
        idle.pop().map(|(session, _)| session)
    }

    fn idle(&self) -> MutexGuard<'_, Vec<(Session, Instant)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}
