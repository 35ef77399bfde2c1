//! One pub/sub connection per backend instance and server (or cluster),
//! shared by every waiter and observer of that instance.
//!
//! It carries two kinds of messages:
//!
//! - **Wake-ups for queued waiters.** The instance subscribes once, at
//!   connect, to its own channel `<prefix>wake:<instance>`. The release
//!   script publishes the id of the next waiter in the lock's queue there,
//!   and we wake exactly that waiter ([`Wakeups::register_waiter`]). No
//!   subscribe or unsubscribe per acquisition.
//! - **Change notices** on named channels (an election's leader channel, a
//!   Redlock lock's released channel), subscribed while someone listens
//!   ([`Wakeups::subscribe`]).
//!
//! On a Redis Cluster the connection goes to one seed node at a time, and to
//! the next seed when it fails: a cluster forwards every `PUBLISH` to all its
//! nodes, so any node hears every wake-up.
//!
//! A wake-up can be lost (the connection drops, the server restarts). Every
//! waiter therefore also sleeps on a timer bounded by the lock's TTL, and
//! after each reconnection every waiter and listener is woken to re-check.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use distlock_core::ErrorKind;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::RedisError;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

use crate::errors::kind_of;

/// How often an idle pub/sub connection is pinged to detect a dead server.
const PING_EVERY: Duration = Duration::from_secs(2);
/// Pause between reconnection attempts.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// The least time one connection attempt gets, however many servers share
/// the connect timeout.
const MIN_ATTEMPT: Duration = Duration::from_millis(250);
/// Pause before subscribing again after the server refused it (ACL).
const RETRY_REFUSED: Duration = Duration::from_secs(5);

/// Local listeners of one server's (or cluster's) pub/sub connection.
pub(crate) struct Wakeups {
    /// Where the connection may go, for messages.
    addr: String,
    instance_channel: String,
    request_timeout: Duration,
    state: Mutex<State>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE with changes to `channels`, so a late
    /// UNSUBSCRIBE can never undo a newer SUBSCRIBE.
    sink: tokio::sync::Mutex<Option<PubSubSink>>,
    /// Whether the connection is up and subscribed to the instance channel.
    ready: watch::Sender<Link>,
}

/// The state of a pub/sub connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// Not (yet) connected and subscribed.
    Down,
    /// Connected and subscribed to the instance channel.
    Ready,
    /// The server refused the subscription (the user's ACL lacks the
    /// channel); the server's answer. Retried now and then.
    Refused(String),
}

#[derive(Default)]
struct State {
    waiters: HashMap<String, Arc<WaiterSlot>>,
    channels: HashMap<String, Channel>,
}

/// Where a queued waiter's wake-up lands.
#[derive(Debug, Default)]
struct WaiterSlot {
    notify: Notify,
    /// The fencing token, when the release script handed the lock over.
    granted: Mutex<Option<u64>>,
}

struct Channel {
    changes: watch::Sender<u64>,
    listeners: usize,
    /// True once the server confirmed our subscription to the channel.
    subscribed: watch::Sender<bool>,
}

impl fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("Wakeups")
            .field("addr", &self.addr)
            .field("instance_channel", &self.instance_channel)
            .field("waiters", &state.waiters.len())
            .field("channels", &state.channels.len())
            .field("ready", &*self.ready.borrow())
            .finish()
    }
}

impl Wakeups {
    /// Starts the pub/sub connection task, which connects to the first of
    /// `servers` (client and address) and moves on to the next whenever the
    /// connection fails. The task ends when the returned handle is dropped.
    pub(crate) fn start(
        servers: Vec<(redis::Client, String)>,
        instance_channel: String,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> (Arc<Wakeups>, WakeTask) {
        let addrs: Vec<&str> = servers.iter().map(|(_, addr)| addr.as_str()).collect();
        let wakeups = Arc::new(Wakeups {
            addr: addrs.join(","),
            instance_channel,
            request_timeout,
            state: Mutex::new(State::default()),
            sink: tokio::sync::Mutex::new(None),
            ready: watch::Sender::new(Link::Down),
        });
        let task = tokio::spawn(run(wakeups.clone(), servers, connect_timeout));
        (wakeups, WakeTask(task))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the connection is subscribed to the instance channel or
    /// the server refused the subscription, at most `limit`.
    pub(crate) async fn wait_ready(&self, limit: Duration) -> Link {
        let mut ready = self.ready.subscribe();
        match timeout(limit, ready.wait_for(|link| *link != Link::Down)).await {
            Ok(Ok(link)) => link.clone(),
            _ => Link::Down,
        }
    }

    /// The instance's wake-up channel, for messages.
    pub(crate) fn instance_channel(&self) -> &str {
        &self.instance_channel
    }

    /// Registers a queued waiter; a message carrying `waiter_id` wakes it.
    /// The registration ends when the returned handle is dropped.
    pub(crate) fn register_waiter(self: &Arc<Self>, waiter_id: &str) -> WaiterWake {
        let slot = Arc::new(WaiterSlot::default());
        self.state()
            .waiters
            .insert(waiter_id.to_owned(), slot.clone());
        WaiterWake {
            wakeups: self.clone(),
            waiter_id: waiter_id.to_owned(),
            slot,
        }
    }

    /// Listens to `channel` from now on. The SUBSCRIBE itself runs in the
    /// background, so a silent server holds up nobody;
    /// [`ChannelWatch::subscribed`] tells when the server confirmed it.
    pub(crate) fn subscribe(self: &Arc<Self>, channel: &str) -> ChannelWatch {
        let (changes, subscribed, first) = {
            let mut state = self.state();
            let first = !state.channels.contains_key(channel);
            let entry = state
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    changes: watch::Sender::new(0),
                    listeners: 0,
                    subscribed: watch::Sender::new(false),
                });
            entry.listeners += 1;
            (
                entry.changes.subscribe(),
                entry.subscribed.subscribe(),
                first,
            )
        };
        if first {
            tokio::spawn(send_subscribe(self.clone(), channel.to_owned()));
        }
        ChannelWatch {
            wakeups: self.clone(),
            channel: channel.to_owned(),
            changes,
            subscribed,
        }
    }

    fn deliver(&self, channel: &str, payload: &[u8]) {
        let state = self.state();
        if channel == self.instance_channel {
            // `<waiter id>` (wake up and retry) or `<waiter id> <token>`
            // (the lock was handed over to you).
            let text = String::from_utf8_lossy(payload);
            let (id, token) = match text.split_once(' ') {
                Some((id, token)) => (id, token.parse::<u64>().ok()),
                None => (text.as_ref(), None),
            };
            if let Some(slot) = state.waiters.get(id) {
                if let Some(token) = token {
                    *slot.granted.lock().unwrap_or_else(|p| p.into_inner()) = Some(token);
                }
                slot.notify.notify_one();
            }
        } else if let Some(entry) = state.channels.get(channel) {
            entry.changes.send_modify(|n| *n += 1);
        }
    }

    /// After a reconnection messages may have been lost: everyone re-checks.
    fn wake_everyone(&self) {
        let state = self.state();
        for slot in state.waiters.values() {
            slot.notify.notify_one();
        }
        for entry in state.channels.values() {
            entry.changes.send_modify(|n| *n += 1);
        }
    }

    fn release_channel(self: &Arc<Self>, channel: String) {
        let last = {
            let mut state = self.state();
            match state.channels.get_mut(&channel) {
                Some(entry) => {
                    entry.listeners = entry.listeners.saturating_sub(1);
                    entry.listeners == 0
                }
                None => false,
            }
        };
        if !last {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let wakeups = self.clone();
        runtime.spawn(async move {
            let mut sink = wakeups.sink.lock().await;
            let still_idle = {
                let mut state = wakeups.state();
                let idle = state
                    .channels
                    .get(&channel)
                    .is_some_and(|e| e.listeners == 0);
                if idle {
                    state.channels.remove(&channel);
                }
                idle
            };
            if still_idle && let Some(sink) = sink.as_mut() {
                let _ = timeout(wakeups.request_timeout, sink.unsubscribe(&channel)).await;
            }
        });
    }
}

/// Sends SUBSCRIBE for a newly listened `channel`, serialised with every
/// other (UN)SUBSCRIBE of this connection, unless the channel was given up
/// meanwhile. Without a connection the next reconnection subscribes it.
async fn send_subscribe(wakeups: Arc<Wakeups>, channel: String) {
    let mut sink = wakeups.sink.lock().await;
    let Some(sink) = sink.as_mut() else { return };
    let Some(subscribed) = wakeups
        .state()
        .channels
        .get(&channel)
        .map(|entry| entry.subscribed.clone())
    else {
        return;
    };
    match timeout(wakeups.request_timeout, sink.subscribe(&channel)).await {
        Ok(Ok(())) => {
            subscribed.send_replace(true);
        }
        Ok(Err(e)) => {
            tracing::debug!(addr = %wakeups.addr, channel, error = %e, "SUBSCRIBE failed; relying on timers until reconnected")
        }
        Err(_) => {
            tracing::debug!(addr = %wakeups.addr, channel, "SUBSCRIBE timed out; relying on timers until reconnected")
        }
    }
}

/// The pub/sub connection loop: connect, subscribe, deliver, ping; on any
/// failure mark not ready, wait a little and start over on the next server.
async fn run(
    wakeups: Arc<Wakeups>,
    servers: Vec<(redis::Client, String)>,
    connect_timeout: Duration,
) {
    // Each server gets its share of the connect timeout, so that one that
    // accepts but never answers cannot keep the others from being tried
    // within it (connect waits that long for the subscription).
    let share = connect_timeout / u32::try_from(servers.len()).unwrap_or(u32::MAX).max(1);
    let per_server = share.max(MIN_ATTEMPT).min(connect_timeout);
    for (client, addr) in servers.iter().cycle() {
        match timeout(per_server, client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => {
                let (sink, mut stream) = pubsub.split();
                let subscribed = subscribe_all(&wakeups, sink.clone()).await;
                if let Err(Some(e)) = &subscribed
                    && kind_of(e) == ErrorKind::Unauthorized
                {
                    // Waiting cannot work for this user: say so at once
                    // (connect fails with it), and ask again rarely.
                    tracing::warn!(addr = %addr, error = %e, "SUBSCRIBE refused");
                    wakeups.ready.send_replace(Link::Refused(e.to_string()));
                    sleep(RETRY_REFUSED).await;
                    continue;
                }
                if subscribed.is_ok() {
                    wakeups.ready.send_replace(Link::Ready);
                    wakeups.wake_everyone();
                    tracing::debug!(addr = %addr, "pub/sub connected");
                    let mut pinger = sink;
                    loop {
                        tokio::select! {
                            message = stream.next() => match message {
                                Some(message) => wakeups.deliver(message.get_channel_name(), message.get_payload_bytes()),
                                None => break,
                            },
                            () = sleep(PING_EVERY) => {
                                if !answers_ping(&mut pinger, wakeups.request_timeout).await {
                                    break;
                                }
                            }
                        }
                    }
                    tracing::debug!(addr = %addr, "pub/sub connection lost; reconnecting");
                }
                wakeups.ready.send_replace(Link::Down);
                *wakeups.sink.lock().await = None;
                for entry in wakeups.state().channels.values() {
                    entry.subscribed.send_replace(false);
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(addr = %addr, error = %e, "pub/sub connect failed")
            }
            Err(_) => tracing::debug!(addr = %addr, "pub/sub connect timed out"),
        }
        sleep(RECONNECT_DELAY).await;
    }
}

/// Whether the server answers a `PING` on the subscribed connection within
/// `limit`. Any reply proves it alive: in subscribed mode RESP2 answers
/// `["pong", ""]` rather than `PONG`, and a user whose ACL lacks `PING`
/// gets an error reply, but a reply all the same.
async fn answers_ping(pinger: &mut PubSubSink, limit: Duration) -> bool {
    match timeout(limit, pinger.ping::<redis::Value>()).await {
        Ok(Ok(_)) => true,
        // A server error code means the server replied.
        Ok(Err(e)) => e.code().is_some(),
        Err(_) => false,
    }
}

/// Installs `sink` and subscribes the instance channel plus every listened
/// channel. Fails with the server's error, or `None` on a timeout.
async fn subscribe_all(wakeups: &Wakeups, sink: PubSubSink) -> Result<(), Option<RedisError>> {
    let mut slot = wakeups.sink.lock().await;
    let mut channels: Vec<String> = wakeups.state().channels.keys().cloned().collect();
    channels.push(wakeups.instance_channel.clone());
    let mut sink = sink;
    let result = match timeout(wakeups.request_timeout, sink.subscribe(&channels)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Some(e)),
        Err(_) => Err(None),
    };
    if result.is_ok() {
        *slot = Some(sink);
        let state = wakeups.state();
        for channel in &channels {
            if let Some(entry) = state.channels.get(channel) {
                entry.subscribed.send_replace(true);
            }
        }
    }
    result
}

/// Stops the pub/sub task when dropped.
#[derive(Debug)]
pub(crate) struct WakeTask(JoinHandle<()>);

impl Drop for WakeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A queued waiter's wake-up; unregisters on drop.
#[derive(Debug)]
pub(crate) struct WaiterWake {
    wakeups: Arc<Wakeups>,
    waiter_id: String,
    slot: Arc<WaiterSlot>,
}

impl WaiterWake {
    /// Resolves when a message for this waiter arrived (or the connection
    /// was re-established). A message that arrived before the call counts.
    pub(crate) async fn woken(&self) {
        self.slot.notify.notified().await;
    }

    /// The fencing token if the lock was handed over to this waiter.
    pub(crate) fn take_grant(&self) -> Option<u64> {
        self.slot
            .granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Drop for WaiterWake {
    fn drop(&mut self) {
        self.wakeups.state().waiters.remove(&self.waiter_id);
    }
}

/// A listener on a named channel; unsubscribes (lazily) on drop.
#[derive(Debug)]
pub(crate) struct ChannelWatch {
    wakeups: Arc<Wakeups>,
    channel: String,
    changes: watch::Receiver<u64>,
    subscribed: watch::Receiver<bool>,
}

impl ChannelWatch {
    /// Resolves at the next message on the channel (or reconnection) since
    /// the last call. Never resolves if the connection task is gone.
    pub(crate) async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            futures::future::pending::<()>().await;
        }
    }

    /// Resolves once the server confirmed the subscription (at once if it
    /// already has). Never resolves if the connection task is gone.
    pub(crate) async fn subscribed(&self) {
        let mut subscribed = self.subscribed.clone();
        if subscribed.wait_for(|s| *s).await.is_err() {
            futures::future::pending::<()>().await;
        }
    }
}

/// Waits until `needed` of `watches` (one per server) are subscribed, at
/// most `limit`: with a majority listening, a release on the servers is
/// heard even if a minority is silent, and no silent server holds us up.
pub(crate) async fn subscribed(watches: &[ChannelWatch], needed: usize, limit: Duration) {
    let mut pending: FuturesUnordered<_> = watches.iter().map(ChannelWatch::subscribed).collect();
    let _ = timeout(limit, async {
        for _ in 0..needed {
            if pending.next().await.is_none() {
                break;
            }
        }
    })
    .await;
}

impl Drop for ChannelWatch {
    fn drop(&mut self) {
        self.wakeups
            .release_channel(std::mem::take(&mut self.channel));
    }
}
