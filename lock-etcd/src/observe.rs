//! Following an election: replaying the queue's history to yield every
//! leader and proclaimed value in order.
//!
//! The follower reads every candidate of the queue, then watches the whole
//! queue from the next revision and applies each revision's events to its
//! copy. After each revision the oldest candidate is the leader; a leader
//! (or value) not seen before is yielded. Since every event is applied, no
//! leader is skipped, however short its reign. When the watch fails, or
//! etcd compacted the revisions it needed (`ErrCompacted`), the follower
//! reads the queue again and carries on; its [`LeaderFilter`] yields only
//! what is newer than the last leader, so nothing is yielded twice or out
//! of order. A failed read of the queue is yielded once; a retryable one
//! is followed by another read, any other ends the stream, as for every
//! backend ([`observer_carries_on_after`]).

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::raw::{LeaderFilter, observer_carries_on_after};
use distlock_core::{FencingToken, LeaderInfo, LeaderStream, LockName, Result};
use etcd_client::{Event, EventType, GetOptions, KeyValue, WatchOptions, WatchStream};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::sleep;
use tracing::Instrument;

use crate::rpc::{Retry, Rpc};

/// Leaders buffered for a slow consumer before the follower waits.
const BUFFER: usize = 16;
/// Pause before reading the queue again after a failure.
const RESYNC_PAUSE: Duration = Duration::from_millis(100);

/// Starts following the election whose queue is `queue`.
pub(crate) async fn follow(rpc: Rpc, queue: String, name: LockName) -> Result<LeaderStream> {
    let span = tracing::debug_span!("etcd.observe", backend = "etcd", election = %name);
    let mut follower = Follower {
        op: format!("observe election {:?}", name.as_str()),
        rpc,
        queue,
        candidates: BTreeMap::new(),
        filter: LeaderFilter::new(),
    };
    let rev = follower.load().await?;
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(follower.run(rev, tx).instrument(span));
    Ok(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed())
}

/// One candidate key of the queue.
#[derive(Debug, Clone)]
struct Candidate {
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Candidate {
    /// The candidate behind `kv`, with its create revision (its queue place).
    fn of(kv: &KeyValue) -> (i64, Candidate) {
        let candidate = Candidate {
            key: kv.key().to_vec(),
            value: kv.value().to_vec(),
        };
        (kv.create_revision(), candidate)
    }
}

struct Follower {
    op: String,
    rpc: Rpc,
    queue: String,
    /// Candidates by create revision: the first is the leader.
    candidates: BTreeMap<i64, Candidate>,
    /// What was yielded last.
    filter: LeaderFilter,
}

impl Follower {
    async fn run(mut self, mut rev: i64, tx: mpsc::Sender<Result<LeaderInfo>>) {
        loop {
            if !self.emit(&tx).await {
                return;
            }
            let consumer_alive = tokio::select! {
                () = tx.closed() => return,
                alive = self.follow_from(rev + 1, &tx) => alive,
            };
            if !consumer_alive {
                return;
            }
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    () = sleep(RESYNC_PAUSE) => {}
                }
                match self.load().await {
                    Ok(next) => {
                        rev = next;
                        break;
                    }
                    Err(e) => {
                        // The rule of every backend's observe stream: the
                        // error is yielded once, and only a retryable one
                        // lets the stream go on. This follower replays
                        // the watch's events instead of re-reading, so it
                        // keeps its own loop and applies the same rule.
                        let carry_on = observer_carries_on_after(&e);
                        if tx.send(Err(e)).await.is_err() || !carry_on {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Applies the queue's events from `start` until the watch ends; returns
    /// false if the consumer went away.
    async fn follow_from(&mut self, start: i64, tx: &mpsc::Sender<Result<LeaderInfo>>) -> bool {
        let Ok(Some(mut stream)) = self.watch(start).await else {
            return true;
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) | Err(_) => return true,
            };
            if response.canceled() {
                tracing::debug!(
                    compact_revision = response.compact_revision(),
                    reason = response.cancel_reason(),
                    "election watch canceled; reading the queue again"
                );
                return true;
            }
            let events = response.events();
            for (i, event) in events.iter().enumerate() {
                let Some(kv) = event.kv() else { continue };
                self.apply(event.event_type(), kv);
                let revision_done = events
                    .get(i + 1)
                    .and_then(Event::kv)
                    .is_none_or(|next| next.mod_revision() != kv.mod_revision());
                if revision_done && !self.emit(tx).await {
                    return false;
                }
            }
        }
    }

    async fn watch(&self, start: i64) -> Result<Option<WatchStream>> {
        let options = WatchOptions::new().with_prefix().with_start_revision(start);
        let queue = self.queue.as_str();
        self.rpc
            .call(&self.op, Retry::Idempotent, |client, _| {
                let options = options.clone();
                async move {
                    let mut stream = client.watch_client().watch(queue, Some(options)).await?;
                    match stream.message().await? {
                        // Compacted before we started: read again.
                        Some(created) if created.canceled() => Ok(None),
                        Some(_) => Ok(Some(stream)),
                        None => Err(etcd_client::Error::WatchError(
                            "watch stream closed before the watch was created".into(),
                        )),
                    }
                }
            })
            .await
    }

    fn apply(&mut self, kind: EventType, kv: &KeyValue) {
        match kind {
            EventType::Put => {
                let (place, candidate) = Candidate::of(kv);
                self.candidates.insert(place, candidate);
            }
            EventType::Delete => {
                self.candidates.retain(|_, c| c.key != kv.key());
            }
        }
    }

    /// Reads every candidate; returns the revision read at.
    async fn load(&mut self) -> Result<i64> {
        let queue = self.queue.as_str();
        let resp = self
            .rpc
            .call(&self.op, Retry::Idempotent, |client, _| async move {
                client
                    .kv_client()
                    .get(queue, Some(GetOptions::new().with_prefix()))
                    .await
            })
            .await?;
        self.candidates = resp.kvs().iter().map(Candidate::of).collect();
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Yields the leader if it is newer than the last one yielded. Returns
    /// false if the consumer went away.
    async fn emit(&mut self, tx: &mpsc::Sender<Result<LeaderInfo>>) -> bool {
        let Some((&token, leader)) = self.candidates.first_key_value() else {
            return true;
        };
        let info = LeaderInfo {
            value: leader.value.clone(),
            token: FencingToken(u64::try_from(token).unwrap_or(0)),
            key: String::from_utf8_lossy(&leader.key).into_owned(),
        };
        if !self.filter.admit(&info) {
            return true;
        }
        tx.send(Ok(info)).await.is_ok()
    }
}
