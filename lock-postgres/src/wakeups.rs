//! Waking waiters: one listening connection per backend, `LISTEN` on the
//! schema's channel, and a [`Notify`] per key that someone waits on.
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

use crate::config::PostgresConfig;
use crate::connect::{describe, open};

/// How long the listener waits before connecting again after a failure.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// The keys waited on, and the task that listens for their notifications.
#[derive(Debug)]
pub(crate) struct Wakeups {
    keys: Mutex<HashMap<String, Arc<Notify>>>,
    config: PostgresConfig,
    channel: String,
    task: Mutex<Task>,
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

/// A waiter's registration for one key; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct KeyWatch {
    wakeups: Arc<Wakeups>,
    key: String,
    notify: Arc<Notify>,
}

impl KeyWatch {
    /// Woken by the next notification of the key (or a reconnect). Call it
    /// before each look at the queue: it first makes sure the backend is
    /// listening, starting the listener on the current runtime if the
    /// runtime that ran it has shut down.
    pub(crate) fn listen(&self) -> &Notify {
        self.wakeups.keep_listening();
        &self.notify
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        let mut keys = self.wakeups.keys();
        // The map's and ours: nobody else waits on the key.
        if Arc::strong_count(&self.notify) <= 2 {
            keys.remove(&self.key);
        }
    }
}

impl Wakeups {
    /// Starts listening on `channel` with a connection of its own, on the
    /// current runtime.
    pub(crate) fn start(config: &PostgresConfig, channel: String) -> (Arc<Self>, Listener) {
        let wakeups = Arc::new(Wakeups {
            keys: Mutex::new(HashMap::new()),
            config: config.clone(),
            channel,
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

    /// Registers interest in `key`.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> KeyWatch {
        let notify = self.keys().entry(key.to_owned()).or_default().clone();
        KeyWatch {
            wakeups: self.clone(),
            key: key.to_owned(),
            notify,
        }
    }

    fn wake(&self, key: &str) {
        if let Some(notify) = self.keys().get(key) {
            notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for notify in self.keys().values() {
            notify.notify_waiters();
        }
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn task(&self) -> MutexGuard<'_, Task> {
        self.task.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Listens until aborted, reconnecting after every failure.
async fn listen(wakeups: Arc<Wakeups>) {
    let (config, channel) = (&wakeups.config, &wakeups.channel);
    loop {
        match listen_once(&wakeups, config, channel).await {
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

async fn listen_once(
    wakeups: &Wakeups,
    config: &PostgresConfig,
    channel: &str,
) -> lock_core::Result<()> {
    let (client, mut connection) = open(config).await?;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let statement = format!("LISTEN \"{channel}\"");
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
                Some(Ok(AsyncMessage::Notification(n))) => wakeups.wake(n.payload()),
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
            Ok(AsyncMessage::Notification(n)) => wakeups.wake(n.payload()),
            Ok(_) => {}
            Err(e) => return Err(crate::errors::from_pg(e, "listen for lock releases")),
        }
    }
    Ok(())
}
