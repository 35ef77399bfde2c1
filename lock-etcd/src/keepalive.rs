//! One gRPC keepalive stream per backend, shared by all its leases.
//!
//! A `LeaseKeepAlive` stream per lease costs about 12 KB of client memory
//! (and a stream of its own on etcd's side): with thousands of held locks
//! that is a third of what holding them costs. So every lease of a
//! backend renews on one stream, as every watch shares one (see
//! [`crate::hub`]).
//!
//! Answers carry the lease id and its new TTL (0: the lease is gone) but no
//! request id. etcd answers the requests of a stream one at a time, in
//! order, so the answers for one lease come back in the order of its
//! requests: the driver task keeps, per lease, a FIFO of the round trips it
//! sent, and gives each answer to the oldest. The driver is the only one
//! that sends, and it queues a round trip and sends its request in one
//! step, so queue order is send order.
//!
//! A cancelled round trip just drops its receiver: its answer still pops
//! its own entry and is thrown away, so it can never be taken for the
//! answer to a later request (which would count a renewal etcd made earlier
//! as made at that later send time, and vouch for the lease past its end).
//! This replaces the per-lease streams' rule that a stream with a round
//! trip cut short was dirty and had to be replaced.
//!
//! When the stream breaks or closes, every pending round trip fails with
//! `Unavailable` (distlock-core's renewal schedule retries it) and the next renewal
//! opens a new stream. A round trip left unanswered for its attempt timeout
//! resets the stream it was sent on (only that one): a silent connection
//! must not keep every lease waiting. Dropping the hub ends the driver.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use distlock_core::Result;
use distlock_core::raw::Renewer;
use etcd_client::proto::PbLeaseKeepAliveRequest;
use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::{Instant, timeout_at};

use crate::errors::EtcdSite;
use crate::rpc::{Retry, Rpc};

/// One renewal waiting to be sent: the lease, and where its TTL goes.
struct Trip {
    id: i64,
    reply: oneshot::Sender<i64>,
}

/// The open shared stream, as the hub sees it.
struct Conn {
    trips: mpsc::UnboundedSender<Trip>,
    /// Held by round trips on this stream, so one that times out resets
    /// this stream and no later one.
    stop: Arc<Stop>,
}

impl Conn {
    fn is_usable(&self) -> bool {
        !self.trips.is_closed() && !self.stop.is_reset()
    }
}

/// Ends one stream's driver.
#[derive(Default)]
struct Stop {
    /// Set at once, so no round trip joins a stream being torn down.
    reset: AtomicBool,
    wake: Notify,
}

impl Stop {
    fn reset(&self) {
        self.reset.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn is_reset(&self) -> bool {
        self.reset.load(Ordering::Acquire)
    }
}

/// The keepalive multiplexer of one backend.
pub(crate) struct KeepAliveHub {
    rpc: Rpc,
    conn: tokio::sync::Mutex<Option<Conn>>,
    /// Numbers the streams, for the logs.
    generations: AtomicU64,
    /// When each lease is due: one schedule for every lease of the backend.
    renewer: Renewer,
}

impl std::fmt::Debug for KeepAliveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAliveHub")
            .field("generations", &self.generations)
            .finish_non_exhaustive()
    }
}

impl KeepAliveHub {
    pub(crate) fn new(rpc: Rpc) -> Arc<Self> {
        Arc::new(KeepAliveHub {
            rpc,
            conn: tokio::sync::Mutex::new(None),
            generations: AtomicU64::new(1),
            renewer: Renewer::new(),
        })
    }

    /// The schedule that decides when each lease is renewed.
    pub(crate) fn renewer(&self) -> &Renewer {
        &self.renewer
    }

    /// One keepalive round trip for lease `id`, within `attempt_timeout`.
    /// `LeaseLost` when etcd says the lease is gone; `Unavailable` when the
    /// stream broke; `Timeout` when no answer came in time, after which the
    /// stream it was sent on is replaced.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled round trip's answer is discarded when it
    /// arrives, and the stream stays usable for every other lease.
    pub(crate) async fn renew(&self, id: i64, attempt_timeout: Duration) -> Result<()> {
        let op = format!("keep lease {id:x} alive");
        let by = Instant::now() + attempt_timeout;
        let mut sent_on = None;
        let outcome = timeout_at(by, self.round_trip(id, &op, by, &mut sent_on)).await;
        match outcome {
            Ok(result) => result,
            Err(_) => {
                if let Some(stop) = sent_on {
                    // The connection may be dead without knowing it.
                    tracing::debug!(lease = %format_args!("{id:x}"), "keepalive unanswered; resetting the stream");
                    stop.reset();
                }
                Err(self.rpc.context(&op).timed_out(attempt_timeout))
            }
        }
    }

    /// Sends one keepalive for `id` on the shared stream, opening it (by
    /// `by`) if needed, and waits for its answer. Sets `sent_on` to the
    /// stream's stop handle once the request is queued on it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a queued request whose receiver is gone is skipped or
    /// its answer dropped; a cancelled opening drops the new stream.
    async fn round_trip(
        &self,
        id: i64,
        op: &str,
        by: Instant,
        sent_on: &mut Option<Arc<Stop>>,
    ) -> Result<()> {
        let ctx = self.rpc.context(op);
        let mut conn = self.conn.lock().await;
        if let Some(open) = conn.as_ref().filter(|c| c.is_usable()) {
            let (reply, answer) = oneshot::channel();
            if open.trips.send(Trip { id, reply }).is_ok() {
                *sent_on = Some(open.stop.clone());
                drop(conn);
                let failure = match answer.await {
                    Ok(ttl) if ttl > 0 => return Ok(()),
                    // Classified `LeaseLost`.
                    Ok(_) => "lease not found: keepalive answered TTL 0",
                    // Classified `Unavailable`.
                    Err(_) => "the shared keepalive stream closed before etcd answered",
                };
                return Err(
                    ctx.client_error(etcd_client::Error::LeaseKeepAliveError(failure.into()))
                );
            }
        }
        // Opening needs a live lease: this one. Its first keepalive is sent
        // and checked (TTL > 0, else "lease not found": `LeaseLost`) by the
        // opening, which is a request like any other (retried, and sent
        // again with a fresh auth token if the old one expired).
        let (keeper, answers) = self
            .rpc
            .call_by(op, Retry::Idempotent, Some(by), |client, _| async move {
                client.lease_client().keep_alive(id).await
            })
            .await?;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(Stop::default());
        let (trips, queue) = mpsc::unbounded_channel();
        tokio::spawn(drive(keeper, answers, queue, stop.clone(), generation));
        tracing::debug!(generation, "keepalive stream opened");
        *conn = Some(Conn { trips, stop });
        Ok(())
    }
}

impl Drop for KeepAliveHub {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.get_mut().take() {
            conn.stop.reset();
        }
    }
}

/// Sends the queued renewals and routes etcd's answers, until the stream
/// breaks, a round trip resets it, or the hub is gone. Dropping the
/// pending replies on the way out fails every round trip still waiting.
async fn drive(
    keeper: LeaseKeeper,
    mut answers: LeaseKeepAliveStream,
    mut queue: mpsc::UnboundedReceiver<Trip>,
    stop: Arc<Stop>,
    generation: u64,
) {
    // Per lease, the replies of the requests sent, oldest first.
    let mut pending: HashMap<i64, VecDeque<oneshot::Sender<i64>>> = HashMap::new();
    let mut next: Option<Trip> = None;
    let why = loop {
        tokio::select! {
            () = stop.wake.notified() => break "reset".to_owned(),
            trip = queue.recv(), if next.is_none() => match trip {
                // Cancelled before it was sent: nothing to send.
                Some(trip) if trip.reply.is_closed() => {}
                Some(trip) => next = Some(trip),
                None => break "the hub is gone".to_owned(),
            },
            permit = keeper.sender.reserve(), if next.is_some() => {
                let Ok(permit) = permit else {
                    break "the request channel closed".to_owned();
                };
                if let Some(Trip { id, reply }) = next.take() {
                    // Queued and sent in one step: queue order is send order.
                    pending.entry(id).or_default().push_back(reply);
                    permit.send(PbLeaseKeepAliveRequest { id });
                }
            }
            answer = answers.message() => match answer {
                Ok(Some(answer)) => {
                    let id = answer.id();
                    if let Some(waiting) = pending.get_mut(&id) {
                        if let Some(reply) = waiting.pop_front() {
                            // A cancelled round trip's answer is dropped here.
                            let _ = reply.send(answer.ttl());
                        }
                        if waiting.is_empty() {
                            pending.remove(&id);
                        }
                    }
                }
                Ok(None) => break "closed by etcd".to_owned(),
                Err(e) => break e.to_string(),
            },
        }
    };
    tracing::debug!(generation, reason = %why, waiting = pending.len(), "keepalive stream ended");
}
