//! One gRPC watch stream per backend, shared by all its watches.
//!
//! Every queue view and every held-key monitor needs a watch.
//! Opening a gRPC stream for each costs a stream setup and teardown on both
//! sides (and two goroutines in etcd); on a shared stream a watch is one
//! create and one cancel message. Watches carry ids chosen here (etcd ≥ 3.4
//! accepts client-chosen ids), so answers are routed without guessing.
//!
//! When the stream breaks, every watch on it is told so and re-reads; the
//! next watch opens a new stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use etcd_client::{WatchOptions, WatchResponse};
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;

use crate::rpc::Rpc;

/// What a watch hears from the hub.
#[derive(Debug)]
pub(crate) enum Heard {
    /// etcd answered for this watch (created, events, or canceled). Boxed:
    /// each watch's channel allocates room for 32 messages up front, and a
    /// held lock's monitor keeps one for as long as the lock is held.
    Answer(Box<WatchResponse>),
    /// The shared stream broke: the watch is gone.
    StreamClosed,
}

type Routes = Arc<Mutex<HashMap<i64, mpsc::UnboundedSender<Heard>>>>;

enum Command {
    Create(String, WatchOptions),
    Cancel(i64),
}

/// The open shared stream, as the hub sees it.
struct Conn {
    commands: mpsc::UnboundedSender<Command>,
    /// The watches on this stream, by id.
    routes: Routes,
    /// Numbers the streams, so a reset hits only the stream it was meant for.
    generation: u64,
    /// Ends the driver (and so the stream) at once.
    stop: Option<oneshot::Sender<()>>,
}

/// The watch multiplexer of one backend.
pub(crate) struct WatchHub {
    rpc: Rpc,
    conn: tokio::sync::Mutex<Option<Conn>>,
    next_id: AtomicI64,
    generations: AtomicU64,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

/// A watch on the shared stream; dropping it cancels the watch.
#[derive(Debug)]
pub(crate) struct HubWatch {
    id: i64,
    generation: u64,
    heard: mpsc::UnboundedReceiver<Heard>,
    routes: Routes,
    commands: mpsc::UnboundedSender<Command>,
}

impl HubWatch {
    /// The stream this watch is on, for [`WatchHub::reset`].
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The next answer for this watch; `StreamClosed` once the stream broke.
    pub(crate) async fn next(&mut self) -> Heard {
        self.heard.recv().await.unwrap_or(Heard::StreamClosed)
    }
}

impl Drop for HubWatch {
    fn drop(&mut self) {
        let known = lock(&self.routes).remove(&self.id).is_some();
        if known {
            let _ = self.commands.send(Command::Cancel(self.id));
        }
    }
}

impl WatchHub {
    pub(crate) fn new(rpc: Rpc) -> Self {
        WatchHub {
            rpc,
            conn: tokio::sync::Mutex::new(None),
            next_id: AtomicI64::new(1),
            generations: AtomicU64::new(1),
        }
    }

    /// Drops stream `generation` if it is still the current one: a watch on
    /// it got no answer in time, so its connection may be dead without
    /// knowing it. Its watches hear `StreamClosed` and re-read.
    pub(crate) async fn reset(&self, generation: u64) {
        let mut conn = self.conn.lock().await;
        if conn.as_ref().is_some_and(|c| c.generation == generation) {
            if let Some(stop) = conn.take().and_then(|mut c| c.stop.take()) {
                let _ = stop.send(());
            }
            tracing::debug!(generation, "watch stream reset after an unanswered watch");
        }
    }

    /// Registers a watch on `key`; answers (starting with "created") arrive
    /// through the returned handle.
    pub(crate) async fn watch(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<HubWatch, etcd_client::Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let options = options.with_watch_id(id);
        let (tx, heard) = mpsc::unbounded_channel();
        let mut conn = self.conn.lock().await;
        if let Some(open) = conn.as_ref().filter(|c| !c.commands.is_closed()) {
            lock(&open.routes).insert(id, tx.clone());
            if open
                .commands
                .send(Command::Create(key.to_owned(), options.clone()))
                .is_ok()
            {
                return Ok(HubWatch {
                    id,
                    generation: open.generation,
                    heard,
                    routes: open.routes.clone(),
                    commands: open.commands.clone(),
                });
            }
            lock(&open.routes).remove(&id);
        }
        let routes: Routes = Arc::new(Mutex::new(HashMap::from([(id, tx)])));
        let mut watch_client = self.rpc.client().watch_client();
        let opening = watch_client.watch(key, Some(options));
        let stream = timeout(self.rpc.request_timeout(), opening)
            .await
            .map_err(|_| {
                etcd_client::Error::WatchError("opening the watch stream timed out".into())
            })??;
        let (commands, queue) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(drive(stream, queue, stopped, routes.clone()));
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        *conn = Some(Conn {
            commands: commands.clone(),
            routes: routes.clone(),
            generation,
            stop: Some(stop),
        });
        Ok(HubWatch {
            id,
            generation,
            heard,
            routes,
            commands,
        })
    }
}

fn lock(routes: &Routes) -> std::sync::MutexGuard<'_, HashMap<i64, mpsc::UnboundedSender<Heard>>> {
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for WatchHub {
    fn drop(&mut self) {
        // Closing the command channel ends the driver, which drops the stream.
        self.conn.get_mut().take();
    }
}

/// Forwards commands to etcd and routes its answers, until the stream
/// breaks, the hub resets it, or the hub is gone.
async fn drive(
    stream: etcd_client::WatchStream,
    mut queue: mpsc::UnboundedReceiver<Command>,
    mut stopped: oneshot::Receiver<()>,
    routes: Routes,
) {
    let (mut sender, mut answers) = stream.split();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            command = queue.recv() => {
                let sent = match command {
                    Some(Command::Create(key, options)) => sender.watch(key, Some(options)).await,
                    Some(Command::Cancel(id)) => sender.cancel(id).await,
                    None => break,
                };
                if sent.is_err() {
                    break;
                }
            }
            answer = answers.message() => {
                let Ok(Some(answer)) = answer else { break };
                let id = answer.watch_id();
                let mut routes = lock(&routes);
                if answer.canceled() {
                    if let Some(route) = routes.remove(&id) {
                        let _ = route.send(Heard::Answer(Box::new(answer)));
                    }
                } else if let Some(route) = routes.get(&id) {
                    let _ = route.send(Heard::Answer(Box::new(answer)));
                }
            }
        }
    }
    // Every watch on this stream is gone: tell them all.
    for (_, route) in lock(&routes).drain() {
        let _ = route.send(Heard::StreamClosed);
    }
}
