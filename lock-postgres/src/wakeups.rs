//! Waking waiters: one listening connection per backend, `LISTEN` on the
//! schema's two channels, and a [`Notify`] per waiter.
//!
//! The key channel's payload is a key: every waiter and observer of that
//! key looks again (a proclaimed value, a new or gone leader, an operator's
//! eviction). The wake channel's payload names queue entries by their owner
//! ids, comma-separated: the server computed that the grant rule now admits
//! exactly them, and every other listener ignores the payload without a
//! query. An id with a token (`owner:token`) was granted in the
//! notifying transaction: its waiter takes the token and is done without a
//! query; an id alone looks again.
//!
//! `NOTIFY` reaches a session only while it is connected, so every
//! reconnect wakes every waiter to look at its queue again; waiters also
//! look again after a bounded nap, in case a notification was lost anyway.
//!
//! The listening task runs on a Tokio runtime, and ends with it. A backend
//! can outlive the runtime it was connected on (a test's runtime, a
//! `block_on` helper), so every look at a queue first checks that the task
//! still runs, and starts it again on the current runtime if not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::AsyncMessage;
use uuid::Uuid;

use crate::config::PostgresConfig;
use crate::connect::{describe, open};

/// How long the listener waits before connecting again after a failure.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// The waiters, and the task that listens for their notifications.
#[derive(Debug)]
pub(crate) struct Wakeups {
    waiters: Mutex<Waiters>,
    config: PostgresConfig,
    channel: String,
    wake_channel: String,
    task: Mutex<Task>,
}

/// Every registered waiter, by key and by queue entry owner.
#[derive(Debug, Default)]
struct Waiters {
    by_key: HashMap<String, Vec<Arc<Notify>>>,
    by_owner: HashMap<Uuid, (Arc<Notify>, Arc<Granted>)>,
}

/// The token of a grant that the server made for a waiter's queue entry
/// and named in a notification.
#[derive(Debug, Default)]
pub(crate) struct Granted(Mutex<Option<i64>>);

impl Granted {
    /// The token, once a notification has granted it.
    pub(crate) fn token(&self) -> Option<i64> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the highest token named: a later grant of ours is higher.
    fn set(&self, token: i64) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *held = Some(held.map_or(token, |t| t.max(token)));
    }
}

/// The listening task's state.
#[derive(Debug)]
enum Task {
    /// Not started: there was no runtime to start it on.
    Idle,
    Running(JoinHandle<()>),
    /// The backend is gone: never start it again.
    Stopped,
}

/// Stops the listening task when the backend goes.
#[derive(Debug)]
pub(crate) struct Listener {
    wakeups: Arc<Wakeups>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Task::Running(task) = std::mem::replace(&mut *self.wakeups.task(), Task::Stopped) {
            task.abort();
        }
    }
}

/// A waiter's registration for one key (and its queue entry, if any);
/// dropping it unregisters.
#[derive(Debug)]
pub(crate) struct KeyWatch {
    wakeups: Arc<Wakeups>,
    key: String,
    owner: Option<Uuid>,
    notify: Arc<Notify>,
    granted: Arc<Granted>,
}

impl KeyWatch {
    /// The highest token of a grant that a notification named, if one did.
    /// A grant of the entry that the last waiting look saw is above the
    /// token that look answered; a lower one was an earlier entry's (see
    /// the acquire loop).
    pub(crate) fn granted(&self) -> Option<i64> {
        self.granted.token()
    }

    /// Woken by the next notification of the key (or a reconnect). Call it
    /// before each look at the queue: it first makes sure the backend is
    /// listening, starting the listener on the current runtime if the
    /// runtime that ran it has shut down.
    pub(crate) fn listen(&self) -> &Arc<Notify> {
        self.wakeups.keep_listening();
        &self.notify
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        let mut waiters = self.wakeups.waiters();
        if let Some(owner) = &self.owner {
            waiters.by_owner.remove(owner);
        }
        if let Some(list) = waiters.by_key.get_mut(&self.key) {
            list.retain(|n| !Arc::ptr_eq(n, &self.notify));
            if list.is_empty() {
                waiters.by_key.remove(&self.key);
            }
        }
    }
}

impl Wakeups {
    /// Starts listening on `channel` with a connection of its own, on the
    /// current runtime.
    pub(crate) fn start(
        config: &PostgresConfig,
        channel: String,
        wake_channel: String,
    ) -> (Arc<Self>, Listener) {
        let wakeups = Arc::new(Wakeups {
            waiters: Mutex::new(Waiters::default()),
            config: config.clone(),
            channel,
            wake_channel,
            task: Mutex::new(Task::Idle),
        });
        wakeups.keep_listening();
        let listener = Listener {
            wakeups: wakeups.clone(),
        };
        (wakeups, listener)
    }

    /// Starts the listening task on the current runtime unless it runs
    /// already. A task that finished was ended by its runtime's shutdown
    /// (it never returns otherwise): its successor's first `LISTEN` wakes
    /// every waiter to look again, so nothing released meanwhile is missed.
    fn keep_listening(self: &Arc<Self>) {
        let mut task = self.task();
        match &*task {
            Task::Running(running) if !running.is_finished() => return,
            Task::Stopped => return,
            Task::Running(_) => tracing::info!(
                server = %describe(&self.config),
                "postgres listening task ended with the runtime that ran it; \
                 listening again from the current runtime"
            ),
            Task::Idle => {}
        }
        match Handle::try_current() {
            Ok(runtime) => *task = Task::Running(runtime.spawn(listen(self.clone()))),
            Err(_) => {
                // Only reachable from a future polled outside Tokio; the
                // waiters' bounded naps still find every release.
                tracing::warn!(
                    server = %describe(&self.config),
                    "no Tokio runtime to listen for lock releases on; \
                     waiters look again every TTL/3"
                );
                *task = Task::Idle;
            }
        }
    }

    /// Registers interest in `key`, and in the queue entry of `owner`.
    pub(crate) fn watch(self: &Arc<Self>, key: &str, owner: Option<Uuid>) -> KeyWatch {
        let notify = Arc::new(Notify::new());
        let granted = Arc::new(Granted::default());
        let mut waiters = self.waiters();
        waiters
            .by_key
            .entry(key.to_owned())
            .or_default()
            .push(notify.clone());
        if let Some(owner) = owner {
            waiters
                .by_owner
                .insert(owner, (notify.clone(), granted.clone()));
        }
        KeyWatch {
            wakeups: self.clone(),
            key: key.to_owned(),
            owner,
            notify,
            granted,
        }
    }

    /// A notification on one of our channels.
    fn notified(&self, channel: &str, payload: &str) {
        if channel == self.wake_channel {
            self.wake_owners(payload);
        } else if let Some(list) = self.waiters().by_key.get(payload) {
            for notify in list {
                notify.notify_waiters();
            }
        }
    }

    /// Wakes the waiters named in `payload` (comma-separated `owner` or
    /// `owner:token`) that wait here, handing each granted one its token;
    /// other names belong to other clients.
    fn wake_owners(&self, payload: &str) {
        let waiters = self.waiters();
        if waiters.by_owner.is_empty() {
            return;
        }
        for name in payload.split(',') {
            let (id, token) = match name.split_once(':') {
                Some((id, token)) => (id, token.trim().parse::<i64>().ok()),
                None => (name, None),
            };
            let Some((notify, granted)) = Uuid::parse_str(id.trim())
                .ok()
                .and_then(|owner| waiters.by_owner.get(&owner))
            else {
                continue;
            };
            if let Some(token) = token {
                granted.set(token);
            }
            notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for list in self.waiters().by_key.values() {
            for notify in list {
                notify.notify_waiters();
            }
        }
    }

    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn task(&self) -> MutexGuard<'_, Task> {
        self.task.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Listens until aborted, reconnecting after every failure.
async fn listen(wakeups: Arc<Wakeups>) {
    let config = &wakeups.config;
    loop {
        match listen_once(&wakeups, config).await {
            Ok(()) => {
                tracing::debug!(server = %describe(config), "postgres listening connection closed")
            }
            Err(e) => tracing::debug!(error = %e, "postgres listening connection failed"),
        }
        // Whatever was notified while we were away is lost: look again.
        wakeups.wake_all();
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

async fn listen_once(wakeups: &Wakeups, config: &PostgresConfig) -> distlock_core::Result<()> {
    let (client, mut connection) = open(config).await?;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let statement = format!(
        "LISTEN \"{}\"; LISTEN \"{}\"",
        wakeups.channel, wakeups.wake_channel
    );
    let listen = client.batch_execute(&statement);
    tokio::pin!(listen);
    // Drive the connection while LISTEN runs.
    loop {
        tokio::select! {
            done = &mut listen => {
                done.map_err(|e| crate::errors::from_pg(e, "listen for lock releases"))?;
                break;
            }
            message = messages.next() => match message {
                Some(Ok(AsyncMessage::Notification(n))) => wakeups.notified(n.channel(), n.payload()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(crate::errors::from_pg(e, "listen for lock releases")),
                None => return Ok(()),
            },
        }
    }
    // Keep the client (and so the connection) for as long as we listen.
    let _client = &client;
    // Listening now: anything released before this point is seen by the
    // waiters' next look.
    wakeups.wake_all();
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(n)) => wakeups.notified(n.channel(), n.payload()),
            Ok(_) => {}
            Err(e) => return Err(crate::errors::from_pg(e, "listen for lock releases")),
        }
    }
    Ok(())
}
