//! Leader election on the queue recipe (Curator's LeaderLatch): the lowest
//! candidate node leads, and its data is the leader's value.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::LockBackend;
use distlock_core::raw::{LeaderSource, observe_leaders};
use distlock_core::{
    Candidacy, ElectionBackend, Error, ErrorKind, FencingToken, LeaderInfo, LeaderStream,
    Leadership, LockName, Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ahead::Ask;
use crate::backend::ZkBackend;
use crate::errors::{ZkSite, in_doubt, session_over};
use crate::keys::{Role, Space, queue_order, sequence_of};
use crate::session::Session;

#[async_trait]
impl ElectionBackend for ZkBackend {
    /// Joins the election's queue with `value` as the node's data and waits
    /// until our node is the lowest. The value is the candidate's only
    /// description (`options.holder` is not stored): Curator's `LeaderLatch`
    /// reads the same data as its participant id.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the candidacy; the candidate node is deleted at
    /// once, or when the connection returns.
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
        let ask = Ask::exclusive(name, Role::Latch);
        let guard = self.acquire_in(ask, &bid.options, &bid.value);
        Ok(Leadership::new(guard.await?, bid.value))
    }

    /// The lowest candidate node and its data. Two round trips.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let dir = self.settings().layout.name_dir(Space::Election, name)?;
        let session = self.session().await?;
        let action = format!("reading the leader of election {name}");
        let doing = crate::errors::doing(&action, &self.settings().connect_string);
        for _ in 0..8 {
            match read_leader(&session, &dir, false).await {
                Ok(Some(Read::Leader(info, _))) => return Ok(Some(info)),
                Ok(Some(Read::Empty(_))) | Ok(None) => return Ok(None),
                Err(ReadError::Retry) => continue,
                Err(ReadError::Zk(e)) if in_doubt(&e) => {
                    session
                        .wait_connected(Instant::now() + session.timing.request)
                        .await
                        .map_err(|e| doing.client_error(e))?;
                }
                Err(ReadError::Zk(e)) => return Err(doing.client_error(e)),
            }
        }
        Err(doing.error(
            ErrorKind::Unavailable,
            "the leader kept changing while being read",
        ))
    }

    /// Yields the current leader (if any), then every new leader and every
    /// proclaimed value, never going back in token order. An error is
    /// yielded once; a retryable one (a session that ended, the servers
    /// unreachable) is followed by more leaders, read on a new session; any
    /// other (an expired session) ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream just stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let dir = self.settings().layout.name_dir(Space::Election, name)?;
        // Fail at once, as before, when no session can be had.
        self.session().await?;
        let source = QueueSource {
            backend: self.clone(),
            dir,
            action: format!("observing election {name}"),
            watcher: None,
            ended: None,
        };
        let reread =
            (self.default_ttl() / 3).clamp(Duration::from_millis(50), Duration::from_secs(2));
        Ok(observe_leaders(source, reread))
    }
}

/// What one read of the election directory found, with a watch that fires
/// on the next change when asked for.
enum Read {
    /// The leader, and a watch on its node.
    Leader(LeaderInfo, Option<zk::OneshotWatcher>),
    /// No candidate, and a watch on the directory (or its creation).
    Empty(Option<zk::OneshotWatcher>),
}

enum ReadError {
    /// The leader vanished between listing and reading it.
    Retry,
    Zk(zk::Error),
}

impl From<zk::Error> for ReadError {
    fn from(e: zk::Error) -> Self {
        ReadError::Zk(e)
    }
}

/// Reads the current leader of `dir`; `Ok(None)` if the directory does not
/// exist (and `watch` is false).
async fn read_leader(session: &Session, dir: &str, watch: bool) -> Result<Option<Read>, ReadError> {
    let client = &session.client;
    let children = match session.call(client.list_children(dir)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) if watch => {
            let (stat, created) = session.call(client.check_and_watch_stat(dir)).await?;
            return match stat {
                Some(_) => Err(ReadError::Retry),
                None => Ok(Some(Read::Empty(Some(created)))),
            };
        }
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(first) = queue_order(children, Space::Election).into_iter().next() else {
        if !watch {
            return Ok(Some(Read::Empty(None)));
        }
        // Watch the directory only while it is empty: a candidate arriving
        // then is the next leader.
        return match session.call(client.list_and_watch_children(dir)).await {
            Ok((children, _))
                if children
                    .iter()
                    .any(|c| sequence_of(c, Space::Election).is_some()) =>
            {
                Err(ReadError::Retry)
            }
            Ok((_, watcher)) => Ok(Some(Read::Empty(Some(watcher)))),
            Err(zk::Error::NoNode) => Err(ReadError::Retry),
            Err(e) => Err(e.into()),
        };
    };
    let path = format!("{dir}/{first}");
    let read = if watch {
        session
            .call(client.get_and_watch_data(&path))
            .await
            .map(|(d, s, w)| (d, s, Some(w)))
    } else {
        session
            .call(client.get_data(&path))
            .await
            .map(|(d, s)| (d, s, None))
    };
    match read {
        Ok((value, stat, watcher)) => Ok(Some(Read::Leader(
            LeaderInfo {
                value,
                token: FencingToken(u64::try_from(stat.czxid).unwrap_or_default()),
                key: path,
            },
            watcher,
        ))),
        Err(zk::Error::NoNode) => Err(ReadError::Retry),
        Err(e) => Err(e.into()),
    }
}

/// The election's queue, read with a watch on its leader (or on the empty
/// directory): the watch is the hint.
struct QueueSource {
    backend: ZkBackend,
    dir: String,
    action: String,
    /// The watch the last read set.
    watcher: Option<zk::OneshotWatcher>,
    /// A session end the watch reported, for the next read to yield.
    ended: Option<Error>,
}

#[async_trait]
impl LeaderSource for QueueSource {
    /// Reads the leader and sets a watch on it, on the current session (a
    /// new one if the last ended); a lost connection is waited out here.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads (a watch set by a dropped read fires
    /// unheard).
    async fn read(&mut self) -> Result<Option<LeaderInfo>> {
        if let Some(ended) = self.ended.take() {
            return Err(ended);
        }
        let session = self.backend.session().await?;
        let doing = crate::errors::doing(&self.action, &session.settings.connect_string);
        loop {
            match read_leader(&session, &self.dir, true).await {
                Ok(Some(Read::Leader(info, watcher))) => {
                    self.watcher = watcher;
                    return Ok(Some(info));
                }
                Ok(Some(Read::Empty(watcher))) => {
                    self.watcher = watcher;
                    return Ok(None);
                }
                Ok(None) | Err(ReadError::Retry) => continue,
                Err(ReadError::Zk(e)) if session_over(&e) => return Err(doing.client_error(e)),
                Err(ReadError::Zk(e)) if in_doubt(&e) => {
                    let until = Instant::now() + session.timing.session;
                    match session.wait_connected(until).await {
                        Err(e) if session_over(&e) => return Err(doing.client_error(e)),
                        _ => continue,
                    }
                }
                Err(ReadError::Zk(e)) => return Err(doing.client_error(e)),
            }
        }
    }

    /// The last read's watch firing; an ended session is kept for the next
    /// read to yield.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped wait loses its watch, and the next read sets
    /// another.
    async fn changed(&mut self) {
        let Some(watcher) = self.watcher.take() else {
            return std::future::pending().await;
        };
        let event = watcher.changed().await;
        if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
            let connect_string = &self.backend.settings().connect_string;
            let doing = crate::errors::doing(&self.action, connect_string);
            self.ended = Some(doing.error(
                ErrorKind::Unavailable,
                format!(
                    "the session ended ({}); reading again on a new one",
                    event.session_state
                ),
            ));
        }
    }
}
