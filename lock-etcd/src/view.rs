//! A live copy of one queue, shared by every waiter of a backend.
//!
//! Waiting on a watch of the predecessor costs, per hand-off, a new watch
//! (a create and a cancel message), a read of the queue after each wake-up,
//! and, whenever a write lands between etcd reading its revision and
//! registering that watch, up to 100 ms in etcd's unsynced-watcher loop,
//! which stalls everyone queued behind. A view keeps one watch per queue
//! open across waits instead: it reads the queue once, at the revision the
//! watch starts after, and applies every put and delete that follows, so
//! it knows the whole queue at each revision it has reached. A waiter
//! decides its turn from the view, without a read: a hand-off is the
//! holder's delete and one watch event.
//!
//! Only the creation of a view's watch can land on etcd's unsynced path;
//! waiters re-read a few times while a view is that young (see
//! [`Subscription::young_since`]). A view stays open for [`LINGER`] after
//! its last waiter leaves, so a client taking the same lock in a loop
//! keeps it. The cost is one event message per queue change to every
//! client that has a view of that queue, in place of the waiter's watch
//! messages and reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use distlock_core::Result;
use etcd_client::{EventType, WatchOptions, WatchResponse};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, timeout};

use crate::backend::Inner;
use crate::errors::EtcdSite;
use crate::hub::{Heard, HubWatch};
use crate::rpc::Retry;

/// How long a view stays open after its last waiter left.
const LINGER: Duration = Duration::from_secs(2);
/// Pause before a broken view opens its watch again.
const REOPEN_PAUSE: Duration = Duration::from_millis(20);

/// One entry of a queue: its key, create revision and value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueEntry<'a> {
    pub(crate) key: &'a str,
    pub(crate) rev: i64,
    pub(crate) value: &'a [u8],
}

/// The queue as a view knows it.
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    /// Key and value of each entry, by create revision (oldest first).
    entries: BTreeMap<i64, (String, Vec<u8>)>,
    /// Create revision of each key.
    revs: HashMap<String, i64>,
    /// The store revision this copy is exact at; 0 before the first read.
    rev: i64,
}

impl Mirror {
    /// The entry created at `rev`, if it still exists.
    pub(crate) fn entry(&self, rev: i64) -> Option<QueueEntry<'_>> {
        self.entries
            .get(&rev)
            .map(|(key, value)| QueueEntry { key, rev, value })
    }

    /// The entries created before `rev`, oldest first.
    pub(crate) fn ahead_of(&self, rev: i64) -> impl DoubleEndedIterator<Item = QueueEntry<'_>> {
        self.entries
            .range(..rev)
            .map(|(&rev, (key, value))| QueueEntry { key, rev, value })
    }

    fn reset(&mut self, entries: impl IntoIterator<Item = (String, i64, Vec<u8>)>, rev: i64) {
        self.entries.clear();
        self.revs.clear();
        for (key, create_rev, value) in entries {
            self.revs.insert(key.clone(), create_rev);
            self.entries.insert(create_rev, (key, value));
        }
        self.rev = rev;
    }

    /// Applies one watch answer: its events, then its revision.
    fn apply(&mut self, answer: &WatchResponse) {
        let changes = answer.events().iter().filter_map(|event| {
            let kv = event.kv()?;
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            Some(match event.event_type() {
                EventType::Put => Change::Put {
                    key,
                    create_rev: kv.create_revision(),
                    mod_rev: kv.mod_revision(),
                    value: kv.value().to_vec(),
                },
                EventType::Delete => Change::Delete {
                    key,
                    mod_rev: kv.mod_revision(),
                },
            })
        });
        let changes: Vec<Change> = changes.collect();
        self.apply_changes(changes, answer.header().map(|h| h.revision()));
    }

    /// Applies the changes of one answer whose header names `header_rev`.
    ///
    /// The header's revision is trusted only in an answer without events (a
    /// progress report, which etcd sends only to a watcher that is caught
    /// up). An answer with events is exact only up to its last event: etcd
    /// sends a watcher that fell behind (unsynced, or a slow consumer made
    /// a victim) its backlog in batches of at most 1,000 revisions, each
    /// carrying the store's current revision in its header, so a view that
    /// took the header's word would claim revisions whose events it has not
    /// seen yet (a waiter's own put, or the delete of a key it then
    /// believes it holds).
    fn apply_changes(&mut self, changes: Vec<Change>, header_rev: Option<i64>) {
        if changes.is_empty() {
            if let Some(rev) = header_rev {
                self.rev = self.rev.max(rev);
            }
            return;
        }
        for change in changes {
            match change {
                Change::Put {
                    key,
                    create_rev,
                    mod_rev,
                    value,
                } => {
                    if let Some(old) = self
                        .revs
                        .insert(key.clone(), create_rev)
                        .filter(|old| *old != create_rev)
                    {
                        self.entries.remove(&old);
                    }
                    self.entries.insert(create_rev, (key, value));
                    self.rev = self.rev.max(mod_rev);
                }
                Change::Delete { key, mod_rev } => {
                    if let Some(rev) = self.revs.remove(&key) {
                        self.entries.remove(&rev);
                    }
                    self.rev = self.rev.max(mod_rev);
                }
            }
        }
    }
}

/// One change of the queue, as a watch event reports it.
#[derive(Debug)]
enum Change {
    Put {
        key: String,
        create_rev: i64,
        mod_rev: i64,
        value: Vec<u8>,
    },
    Delete {
        key: String,
        mod_rev: i64,
    },
}

/// The views of one backend, by queue.
#[derive(Debug, Default)]
pub(crate) struct Views {
    open: Mutex<HashMap<String, Arc<View>>>,
}

/// One queue's view: the copy, and who uses it.
#[derive(Debug)]
struct View {
    queue: String,
    mirror: Mutex<Mirror>,
    /// Bumped after every change of `mirror`.
    changed: watch::Sender<u64>,
    /// When the current watch was created, while one is open.
    watch_created: Mutex<Option<Instant>>,
    users: AtomicUsize,
    last_used: Mutex<Instant>,
}

/// A waiter's use of a view; dropping it lets the view close after
/// [`LINGER`].
#[derive(Debug)]
pub(crate) struct Subscription {
    view: Arc<View>,
    changes: watch::Receiver<u64>,
}

/// Subscribes to the view of `queue`, opening it (in the background) if
/// this backend has none. Does no I/O itself.
pub(crate) fn subscribe(inner: &Arc<Inner>, queue: &str) -> Subscription {
    let mut open = lock(&inner.views.open);
    let view = open
        .entry(queue.to_owned())
        .or_insert_with(|| {
            let view = Arc::new(View {
                queue: queue.to_owned(),
                mirror: Mutex::new(Mirror::default()),
                changed: watch::Sender::new(0),
                watch_created: Mutex::new(None),
                users: AtomicUsize::new(0),
                last_used: Mutex::new(Instant::now()),
            });
            tokio::spawn(follow(Arc::downgrade(inner), view.clone()));
            view
        })
        .clone();
    view.users.fetch_add(1, Ordering::SeqCst);
    Subscription {
        changes: view.changed.subscribe(),
        view,
    }
}

impl Subscription {
    /// Runs `decide` on the queue if the view has reached revision
    /// `min_rev`; `None` while it has not. [`Subscription::changed`] then
    /// waits for a change after this read.
    pub(crate) fn read<T>(&mut self, min_rev: i64, decide: impl FnOnce(&Mirror) -> T) -> Option<T> {
        self.changes.borrow_and_update();
        let mirror = lock(&self.view.mirror);
        (mirror.rev >= min_rev).then(|| decide(&mirror))
    }

    /// Waits until the view changed since it was last read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a change not yet waited for is still reported by the
    /// next call.
    pub(crate) async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            // The view is gone (the backend is closing): never wakes.
            std::future::pending::<()>().await;
        }
    }

    /// When the view's watch was created, if it is open: its first events
    /// may come through etcd's unsynced loop, up to 100 ms late.
    pub(crate) fn young_since(&self) -> Option<Instant> {
        *lock(&self.view.watch_created)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        *lock(&self.view.last_used) = Instant::now();
        self.view.users.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Keeps `view` current until it has had no user for [`LINGER`] or the
/// backend is gone, opening its watch again whenever it breaks.
async fn follow(inner: Weak<Inner>, view: Arc<View>) {
    loop {
        let Some(backend) = inner.upgrade() else {
            break;
        };
        // Boxed: the task lives as long as the view, mostly waiting for
        // events, and would otherwise always be as large as this step.
        let opened = Box::pin(open(&backend, &view)).await;
        drop(backend);
        match opened {
            Ok(watch) => {
                if keep_current(&inner, &view, watch).await == Ended::Retired {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(queue = view.queue, error = %e, "could not open the queue view")
            }
        }
        *lock(&view.watch_created) = None;
        if retire(&inner, &view) {
            return;
        }
        sleep(REOPEN_PAUSE).await;
    }
    *lock(&view.watch_created) = None;
}

/// Opens the view's watch and reads the queue at the revision it starts
/// after, so the watch's events continue the read exactly.
async fn open(inner: &Inner, view: &View) -> Result<HubWatch> {
    let op = format!("watch queue {}", view.queue);
    let request_timeout = inner.rpc.request_timeout();
    let mut watch = inner
        .hub
        .watch(&view.queue, WatchOptions::new().with_prefix())
        .await
        .map_err(|e| inner.rpc.context(&op).client_error(e))?;
    let created = match timeout(request_timeout, watch.next()).await {
        Ok(Heard::Answer(created)) if !created.canceled() => created,
        Ok(_) => {
            return Err(distlock_core::Error::unavailable(format!(
                "{op}: the watch was refused or its stream closed"
            )));
        }
        Err(_) => {
            inner.hub.reset(watch.generation()).await;
            return Err(inner.rpc.context(&op).timed_out(request_timeout));
        }
    };
    let created_at = Instant::now();
    let start = created.header().map_or(0, |h| h.revision());
    let queue = view.queue.clone();
    let read = inner
        .rpc
        .call(&op, Retry::Idempotent, |client, _| {
            let queue = queue.clone();
            async move {
                let options = crate::queue::oldest_first().with_revision(start);
                client.kv_client().get(queue, Some(options)).await
            }
        })
        .await?;
    let entries = read.kvs().iter().map(|kv| {
        (
            String::from_utf8_lossy(kv.key()).into_owned(),
            kv.create_revision(),
            kv.value().to_vec(),
        )
    });
    lock(&view.mirror).reset(entries, start);
    *lock(&view.watch_created) = Some(created_at);
    view.changed.send_modify(|n| *n += 1);
    Ok(watch)
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The watch broke: open it again.
    Broken,
    /// No one used the view for [`LINGER`]: it is closed.
    Retired,
}

/// Applies the watch's answers to the view until the watch breaks or the
/// view retires.
async fn keep_current(inner: &Weak<Inner>, view: &View, mut watch: HubWatch) -> Ended {
    let mut idle_check = tokio::time::interval_at(Instant::now() + LINGER, LINGER);
    loop {
        tokio::select! {
            heard = watch.next() => match heard {
                Heard::Answer(answer) if answer.canceled() => {
                    tracing::debug!(queue = view.queue, reason = answer.cancel_reason(), "queue view canceled by etcd");
                    return Ended::Broken;
                }
                Heard::Answer(answer) => {
                    lock(&view.mirror).apply(&answer);
                    view.changed.send_modify(|n| *n += 1);
                }
                Heard::StreamClosed => return Ended::Broken,
            },
            _ = idle_check.tick() => {
                if retire(inner, view) {
                    return Ended::Retired;
                }
            }
        }
    }
}

/// Removes the view from its backend if no one used it for [`LINGER`] (or
/// the backend is gone); whether it did.
fn retire(inner: &Weak<Inner>, view: &View) -> bool {
    let Some(backend) = inner.upgrade() else {
        return true;
    };
    let mut open = lock(&backend.views.open);
    let idle = view.users.load(Ordering::SeqCst) == 0 && lock(&view.last_used).elapsed() >= LINGER;
    if idle {
        open.remove(&view.queue);
    }
    idle
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, rev: i64) -> Change {
        Change::Put {
            key: key.to_owned(),
            create_rev: rev,
            mod_rev: rev,
            value: Vec::new(),
        }
    }

    fn delete(key: &str, rev: i64) -> Change {
        Change::Delete {
            key: key.to_owned(),
            mod_rev: rev,
        }
    }

    /// A lagging watcher's backlog comes in batches whose header names the
    /// store's current revision: the view must not claim that revision
    /// before it has seen the events up to it.
    #[test]
    fn a_batch_of_a_backlog_counts_only_up_to_its_last_event() {
        let mut mirror = Mirror::default();
        mirror.reset([("q/holder".to_owned(), 10, Vec::new())], 10);
        // 1,000 revisions of another key arrive; the store is at 2,000,
        // where our own key (created at 1,500) and the holder's delete
        // (at 1,900) lie in batches still to come.
        let batch: Vec<Change> = (11..=1010).map(|rev| put("q/other", rev)).collect();
        mirror.apply_changes(batch, Some(2_000));
        assert_eq!(mirror.rev, 1010, "exact only up to the last event");
        // A waiter whose key was created at 1,500 does not read this view yet.
        assert!(mirror.rev < 1500);
        mirror.apply_changes(
            vec![put("q/ours", 1500), delete("q/holder", 1900)],
            Some(2_000),
        );
        assert_eq!(mirror.rev, 1900);
        assert!(mirror.entry(1500).is_some());
        assert!(mirror.entry(10).is_none());
    }

    /// An answer without events is a progress report, sent only to a
    /// watcher that is caught up: its header is exact.
    #[test]
    fn a_progress_report_moves_the_view_to_its_header() {
        let mut mirror = Mirror::default();
        mirror.reset([], 10);
        mirror.apply_changes(Vec::new(), Some(42));
        assert_eq!(mirror.rev, 42);
    }
}
