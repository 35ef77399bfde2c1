//! The one observe loop every backend's [`ElectionBackend::observe`] runs.
//!
//! A backend supplies a [`LeaderSource`]: how to read the current leader,
//! and a wake-up hint (a watch, a notification, a pub/sub message) that a
//! leader may have changed. [`observe_leaders`] does the rest, the same way
//! for every backend: it reads the leader, yields it if the
//! [`LeaderFilter`] admits it, and otherwise waits for the hint or a
//! re-read interval, whichever comes first, since a hint can be lost.
//!
//! After an error the rule is [`observer_carries_on_after`]: the error is
//! yielded once; a retryable one is followed by a pause
//! ([`ObserveBackoff`]) and another read, any other ends the stream.
//!
//! [`ElectionBackend::observe`]: crate::ElectionBackend::observe

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::election::{LeaderInfo, LeaderStream};
use crate::error::{Error, Result};
use crate::leader_filter::LeaderFilter;

/// The longest pause between reads after repeated retryable errors: long
/// enough not to hammer a struggling server, short enough that an observer
/// hears of a new leader soon after the server is back.
pub const OBSERVE_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Where an observe loop learns of leaders: one backend's read of the
/// current leader, and its hint that the leader may have changed.
///
/// The loop calls [`arm`](Self::arm), then [`read`](Self::read), then
/// waits for [`changed`](Self::changed) (or its re-read interval). Arming
/// before reading is what keeps a change made during the read from being
/// missed: its hint arrives after `arm`, so `changed` resolves at once.
#[async_trait]
pub trait LeaderSource: Send {
    /// Starts listening for the next hint; called before every
    /// [`read`](Self::read). The default does nothing, for sources whose
    /// hints are remembered anyway (a watch channel's version) or set by
    /// the read itself (a ZooKeeper watch).
    fn arm(&mut self) {}

    /// The current leader, if there is one.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe: a dropped read only reads.
    async fn read(&mut self) -> Result<Option<LeaderInfo>>;

    /// Resolves once a hint arrived since the last [`arm`](Self::arm) (at
    /// once if one already has). It may resolve spuriously, which costs a
    /// read; it may also never resolve, since the loop re-reads anyway.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe: the loop drops it when its re-read interval
    /// runs out first, and then arms again before the next read.
    async fn changed(&mut self);
}

/// A [`LeaderSource`]'s hint from a [`Notify`] that this process signals
/// on every change it makes (or hears of): [`arm`](Self::arm) enables a
/// wait before the read, so a signal sent during the read is kept, and
/// [`changed`](Self::changed) resolves on it.
#[derive(Default)]
pub struct NotifyHint {
    armed: Option<Pin<Box<OwnedNotified>>>,
}

impl NotifyHint {
    /// No wait armed yet: [`changed`](Self::changed) never resolves.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a wait on `notify` that counts signals from now on.
    pub fn arm(&mut self, notify: Arc<Notify>) {
        let mut armed = Box::pin(notify.notified_owned());
        armed.as_mut().enable();
        self.armed = Some(armed);
    }

    /// Resolves once `notify` was signalled since the last
    /// [`arm`](Self::arm).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the armed wait is kept until it resolves or is armed
    /// again.
    pub async fn changed(&mut self) {
        match self.armed.as_mut() {
            Some(armed) => armed.as_mut().await,
            None => std::future::pending().await,
        }
    }
}

impl std::fmt::Debug for NotifyHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyHint")
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

/// Whether an observe stream goes on after yielding `error`.
///
/// A retryable error ([`Error::is_retryable`]: a timeout, an unreachable
/// server) says nothing about the election, so the observer pauses and
/// reads again; any other (a lost session, a refused configuration, a
/// backend without elections) will not pass by itself, so the stream ends
/// and the caller decides whether to observe again.
pub fn observer_carries_on_after(error: &Error) -> bool {
    error.is_retryable()
}

/// The pauses between reads after retryable errors: the first is the
/// re-read interval, each next one twice the last, up to
/// [`OBSERVE_BACKOFF_CAP`]; a successful read starts over.
#[derive(Debug, Clone)]
pub struct ObserveBackoff {
    first: Duration,
    next: Duration,
}

impl ObserveBackoff {
    /// Pauses starting at `first` (the backend's re-read interval).
    pub fn new(first: Duration) -> Self {
        let first = first.min(OBSERVE_BACKOFF_CAP);
        ObserveBackoff { first, next: first }
    }

    /// The pause before the next read, and doubles the one after it.
    pub fn pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (pause * 2).min(OBSERVE_BACKOFF_CAP);
        pause
    }

    /// After a successful read: the next error pauses for `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Follows the leaders `source` reads: the current one first, then each one
/// the [`LeaderFilter`] admits, reading again on every hint and at least
/// every `reread` in case a hint was lost.
///
/// An error is yielded once; then the stream goes on (after an
/// [`ObserveBackoff`] pause) if [`observer_carries_on_after`] says so, and
/// ends otherwise.
pub fn observe_leaders<S: LeaderSource + 'static>(source: S, reread: Duration) -> LeaderStream {
    let observer = Observer {
        source,
        filter: LeaderFilter::new(),
        reread,
        backoff: ObserveBackoff::new(reread),
        before_read: BeforeRead::Nothing,
    };
    futures::stream::unfold(observer, |mut observer| async move {
        let item = observer.next().await?;
        Some((item, observer))
    })
    .boxed()
}

/// What the observer does before its next read.
#[derive(Debug, Clone, Copy)]
enum BeforeRead {
    /// Read at once: the first read.
    Nothing,
    /// Wait for a hint or the re-read interval.
    Wait,
    /// Pause after a retryable error.
    Pause(Duration),
    /// Nothing more: a non-retryable error ended the stream.
    Stop,
}

struct Observer<S> {
    source: S,
    filter: LeaderFilter,
    reread: Duration,
    backoff: ObserveBackoff,
    before_read: BeforeRead,
}

impl<S: LeaderSource> Observer<S> {
    /// The next item of the stream; `None` once it ended.
    ///
    /// # Cancel safety
    ///
    /// Only ever cancelled by dropping the stream, which ends observing.
    async fn next(&mut self) -> Option<Result<LeaderInfo>> {
        loop {
            match self.before_read {
                BeforeRead::Nothing => {}
                BeforeRead::Wait => {
                    let _ = tokio::time::timeout(self.reread, self.source.changed()).await;
                }
                BeforeRead::Pause(pause) => tokio::time::sleep(pause).await,
                BeforeRead::Stop => return None,
            }
            self.before_read = BeforeRead::Wait;
            self.source.arm();
            match self.source.read().await {
                Ok(leader) => {
                    self.backoff.reset();
                    match leader {
                        Some(leader) if self.filter.admit(&leader) => return Some(Ok(leader)),
                        _ => {}
                    }
                }
                Err(error) => {
                    self.before_read = if observer_carries_on_after(&error) {
                        BeforeRead::Pause(self.backoff.pause())
                    } else {
                        BeforeRead::Stop
                    };
                    return Some(Err(error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::{Instant, timeout};

    use super::*;
    use crate::error::ErrorKind;
    use crate::fencing::FencingToken;

    const REREAD: Duration = Duration::from_millis(100);

    fn leader(token: u64, value: &str) -> LeaderInfo {
        LeaderInfo {
            value: value.as_bytes().to_vec(),
            token: FencingToken(token),
            key: format!("k{token}"),
        }
    }

    /// Answers reads from a script, then waits forever; its hint never
    /// comes, so every read after the first follows a re-read interval.
    struct Scripted {
        reads: VecDeque<Result<Option<LeaderInfo>>>,
        count: Arc<AtomicUsize>,
    }

    fn scripted(reads: Vec<Result<Option<LeaderInfo>>>) -> (LeaderStream, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        let source = Scripted {
            reads: reads.into(),
            count: count.clone(),
        };
        (observe_leaders(source, REREAD), count)
    }

    #[async_trait]
    impl LeaderSource for Scripted {
        async fn read(&mut self) -> Result<Option<LeaderInfo>> {
            match self.reads.pop_front() {
                Some(read) => {
                    self.count.fetch_add(1, Ordering::SeqCst);
                    read
                }
                None => std::future::pending().await,
            }
        }

        async fn changed(&mut self) {
            std::future::pending::<()>().await
        }
    }

    /// The next item, or `None` if none came within a minute (of paused
    /// time: the runtime skips ahead, so this takes no real time).
    async fn next_within_a_minute(stream: &mut LeaderStream) -> Option<Option<Result<LeaderInfo>>> {
        timeout(Duration::from_secs(60), stream.next()).await.ok()
    }

    #[test]
    fn only_retryable_errors_let_the_stream_go_on() {
        assert!(observer_carries_on_after(&Error::timeout("slow")));
        assert!(observer_carries_on_after(&Error::new(
            ErrorKind::Unavailable,
            "down"
        )));
        assert!(!observer_carries_on_after(&Error::lease_lost("session")));
        assert!(!observer_carries_on_after(&Error::invalid_config("no")));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_starts_over_after_a_read() {
        let mut backoff = ObserveBackoff::new(Duration::from_secs(1));
        let pauses: Vec<_> = (0..5).map(|_| backoff.pause().as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.pause(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn yields_the_current_leader_at_once() {
        let (mut stream, _) = scripted(vec![Ok(Some(leader(3, "a")))]);
        let start = Instant::now();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first, leader(3, "a"));
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "no wait before the first read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn yields_only_what_the_filter_admits() {
        let (mut stream, count) = scripted(vec![
            Ok(None),
            Ok(Some(leader(3, "a"))),
            Ok(Some(leader(3, "a"))),
            Ok(Some(leader(2, "old"))),
            Ok(Some(leader(3, "b"))),
            Ok(Some(leader(4, "b"))),
        ]);
        let mut yielded = Vec::new();
        while let Some(Some(item)) = next_within_a_minute(&mut stream).await {
            yielded.push(item.unwrap());
        }
        assert_eq!(yielded, [leader(3, "a"), leader(3, "b"), leader(4, "b")]);
        assert_eq!(
            count.load(Ordering::SeqCst),
            6,
            "every scripted read was made"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retryable_error_is_yielded_once_and_the_stream_goes_on() {
        let (mut stream, _) = scripted(vec![
            Ok(Some(leader(1, "a"))),
            Err(Error::timeout("slow server")),
            Ok(Some(leader(1, "a"))),
            Ok(Some(leader(2, "b"))),
        ]);
        assert_eq!(stream.next().await.unwrap().unwrap(), leader(1, "a"));
        let error = stream.next().await.unwrap().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Timeout);
        let start = Instant::now();
        let after = next_within_a_minute(&mut stream).await.unwrap().unwrap();
        assert_eq!(
            after.unwrap(),
            leader(2, "b"),
            "the same leader is not yielded again"
        );
        assert!(start.elapsed() >= REREAD, "it paused before reading again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_non_retryable_error_is_yielded_once_and_ends_the_stream() {
        let (mut stream, count) = scripted(vec![
            Ok(Some(leader(1, "a"))),
            Err(Error::lease_lost("session expired")),
            Ok(Some(leader(2, "b"))),
        ]);
        assert_eq!(stream.next().await.unwrap().unwrap(), leader(1, "a"));
        let error = stream.next().await.unwrap().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::LeaseLost);
        assert!(stream.next().await.is_none(), "the stream ended");
        assert_eq!(count.load(Ordering::SeqCst), 2, "no read after the error");
    }

    /// A source whose hint is a `Notify`, armed before each read, as the
    /// file and PostgreSQL backends' are.
    struct Hinted {
        hint: Arc<tokio::sync::Notify>,
        armed: Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
        leader: Arc<std::sync::Mutex<Option<LeaderInfo>>>,
    }

    #[async_trait]
    impl LeaderSource for Hinted {
        fn arm(&mut self) {
            let mut armed = Box::pin(self.hint.clone().notified_owned());
            armed.as_mut().enable();
            self.armed = Some(armed);
        }

        async fn read(&mut self) -> Result<Option<LeaderInfo>> {
            Ok(self.leader.lock().unwrap().clone())
        }

        async fn changed(&mut self) {
            match self.armed.take() {
                Some(armed) => armed.await,
                None => std::future::pending().await,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hint_wakes_the_observer_before_its_reread_interval() {
        let hint = Arc::new(tokio::sync::Notify::new());
        let current = Arc::new(std::sync::Mutex::new(None));
        let source = Hinted {
            hint: hint.clone(),
            armed: None,
            leader: current.clone(),
        };
        let mut stream = observe_leaders(source, Duration::from_secs(3600));
        assert!(
            next_within_a_minute(&mut stream).await.is_none(),
            "no leader yet"
        );
        *current.lock().unwrap() = Some(leader(7, "a"));
        hint.notify_waiters();
        let start = Instant::now();
        let item = next_within_a_minute(&mut stream).await.unwrap().unwrap();
        assert_eq!(item.unwrap(), leader(7, "a"));
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "woken, not re-read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_notify_hint_keeps_a_signal_sent_after_it_was_armed() {
        let notify = Arc::new(Notify::new());
        let mut hint = NotifyHint::new();
        assert!(
            timeout(REREAD, hint.changed()).await.is_err(),
            "an unarmed hint never resolves"
        );
        hint.arm(notify.clone());
        // Signalled while the read would run, before anyone waits.
        notify.notify_waiters();
        timeout(REREAD, hint.changed())
            .await
            .expect("the signal sent after arming wakes the wait");
        hint.arm(notify.clone());
        assert!(
            timeout(REREAD, hint.changed()).await.is_err(),
            "arming again forgets the signal already seen"
        );
    }
}
