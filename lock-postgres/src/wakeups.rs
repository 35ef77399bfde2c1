//! Waking waiters: one listening connection per backend, `LISTEN` on the
//! schema's channel, and a [`Notify`] per key that someone waits on.
//!
//! `NOTIFY` reaches a session only while it is connected, so every
//! reconnect wakes every waiter to look at its queue again; waiters also
//! look again after a bounded nap, in case a notification was lost anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
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
}

/// Stops the listening task when the backend goes.
#[derive(Debug)]
pub(crate) struct Listener {
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
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
    /// Woken by the next notification of the key (or a reconnect).
    pub(crate) fn notify(&self) -> &Notify {
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
        });
        let task = tokio::spawn(listen(wakeups.clone(), config.clone(), channel));
        (wakeups, Listener { task })
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
}

/// Listens until aborted, reconnecting after every failure.
async fn listen(wakeups: Arc<Wakeups>, config: PostgresConfig, channel: String) {
    loop {
        match listen_once(&wakeups, &config, &channel).await {
            Ok(()) => {
                tracing::debug!(server = %describe(&config), "postgres listening connection closed")
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
