//! Semaphores and read-write locks on a real etcd: the limit under
//! contention, writer preference, tries that leave nothing behind, and
//! waiters woken only by the entries they wait for.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::GetOptions;
use lock_core::{ErrorKind, LockBackendExt, LockGuard};
use lock_etcd::EtcdBackend;
use lock_testkit::assert::{fails_with, joined, within};
use support::{PREFIX, backend, next_put_key, raw_client, start_cluster, watch_queue};
use tokio::sync::watch;

const SLACK: Duration = Duration::from_secs(10);
const LIMIT: u32 = 3;
const CLIENTS: usize = 6;
const ROUNDS: usize = 6;

/// The queue of semaphore or read-write lock `name` (`space` is
/// `semaphore` or `rwlock`), as the crate docs give it, for a name without
/// `/` or `%`.
fn queue(space: &str, name: &str) -> String {
    format!("{PREFIX}/{space}/{name}/")
}

/// How many keys the queue `queue` holds now.
async fn keys_in(raw: &mut etcd_client::Client, queue: &str) -> i64 {
    let options = GetOptions::new().with_prefix().with_count_only();
    raw.get(queue, Some(options)).await.expect("count").count()
}

#[tokio::test]
async fn six_clients_never_hold_more_than_three_permits_and_fill_all_three() {
    let cluster = start_cluster(1).await;
    let name = "shared-contention";
    let inside = Arc::new(AtomicUsize::new(0));
    // The most holders seen inside at once, published to the first round's
    // holders, which each stay until all three permits are in use.
    let (most, _) = watch::channel(0usize);
    let most = Arc::new(most);
    let grants = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = backend(&cluster).await;
        let (inside, most, grants) = (inside.clone(), most.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let guard = client.permit(name, LIMIT).await.expect("a permit");
                // Not atomic on purpose: a read, a pause, a write. Only the
                // limit of holders keeps the count exact.
                let now = inside.load(Ordering::SeqCst) + 1;
                inside.fetch_add(1, Ordering::SeqCst);
                assert!(now <= LIMIT as usize, "{now} holders of {LIMIT} permits");
                most.send_modify(|most| *most = (*most).max(inside.load(Ordering::SeqCst)));
                if round == 0 {
                    let mut full = most.subscribe();
                    within(SLACK, "all three permits in use", async {
                        full.wait_for(|most| *most >= LIMIT as usize).await.unwrap();
                    })
                    .await;
                } else {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                grants.fetch_add(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        joined(Duration::from_secs(120), "a contending client", task).await;
    }
    assert_eq!(grants.load(Ordering::SeqCst), CLIENTS * ROUNDS);
    assert_eq!(*most.borrow(), LIMIT as usize);
    let mut raw = raw_client(&cluster).await;
    assert_eq!(keys_in(&mut raw, &queue("semaphore", name)).await, 0);
}

#[tokio::test]
async fn a_queued_writer_goes_before_a_later_reader() {
    let cluster = start_cluster(1).await;
    let name = "shared-writer-first";
    let mut raw = raw_client(&cluster).await;
    let mut puts = watch_queue(&mut raw, &queue("rwlock", name)).await;
    let first_reader = backend(&cluster).await;
    let reader = first_reader.read_lock(name).await.expect("read");
    next_put_key(&mut puts).await;

    let order = Arc::new(Mutex::new(Vec::new()));
    let writer_inside = Arc::new(AtomicUsize::new(0));
    let (release_writer, mut writer_may_go) = watch::channel(false);
    let (writer_in, writer_granted) = tokio::sync::oneshot::channel();
    let writer = {
        let (client, order, inside) = (backend(&cluster).await, order.clone(), writer_inside.clone());
        tokio::spawn(async move {
            let guard = client.write_lock(name).await.expect("write");
            inside.store(1, Ordering::SeqCst);
            order.lock().unwrap().push(("write", guard.token()));
            writer_in.send(()).unwrap();
            writer_may_go.wait_for(|go| *go).await.unwrap();
            inside.store(0, Ordering::SeqCst);
            guard.release().await.expect("release the writer");
        })
    };
    next_put_key(&mut puts).await;
    let late_reader = {
        let (client, order, inside) = (backend(&cluster).await, order.clone(), writer_inside.clone());
        tokio::spawn(async move {
            let guard = client.read_lock(name).await.expect("late read");
            assert_eq!(inside.load(Ordering::SeqCst), 0, "a reader inside with the writer");
            order.lock().unwrap().push(("read", guard.token()));
            guard
        })
    };
    next_put_key(&mut puts).await;
    // Readers may share with a holding reader, but not jump a waiting writer.
    let other = backend(&cluster).await;
    fails_with(ErrorKind::WouldBlock, "a read behind a waiting writer", other.try_read_lock(name).await);
    assert!(order.lock().unwrap().is_empty(), "nobody but the first reader is in");

    reader.release().await.expect("release the first reader");
    within(SLACK, "the writer gets in", writer_granted).await.unwrap();
    assert_eq!(order.lock().unwrap().len(), 1, "the late reader went in with the writer");
    release_writer.send(true).unwrap();
    joined(SLACK, "the writer", writer).await;
    let late: LockGuard = joined(SLACK, "the late reader", late_reader).await;
    let order = order.lock().unwrap().clone();
    assert_eq!(order.iter().map(|(who, _)| *who).collect::<Vec<_>>(), ["write", "read"]);
    assert!(order[0].1 < order[1].1, "tokens follow the grants: {order:?}");
    late.release().await.expect("release the late reader");
}

#[tokio::test]
async fn a_try_that_would_block_leaves_no_key_behind() {
    let cluster = start_cluster(1).await;
    let (a, b) = (backend(&cluster).await, backend(&cluster).await);
    let mut raw = raw_client(&cluster).await;
    let held = a.try_permit("shared-try", 1).await.expect("the one permit");
    fails_with(ErrorKind::WouldBlock, "a second permit", b.try_permit("shared-try", 1).await);
    // A semaphore with room lets a try in behind its holders.
    let more = b.try_permit("shared-try-room", 2).await.expect("first of two");
    let second = a.try_permit("shared-try-room", 2).await.expect("second of two");
    assert!(second.token() > more.token());
    fails_with(ErrorKind::WouldBlock, "a third of two", b.try_permit("shared-try-room", 2).await);
    let writer = a.try_write_lock("shared-try").await.expect("the rwlock is apart");
    fails_with(ErrorKind::WouldBlock, "a read beside the writer", b.try_read_lock("shared-try").await);
    assert_eq!(keys_in(&mut raw, &queue("semaphore", "shared-try")).await, 1);
    assert_eq!(keys_in(&mut raw, &queue("semaphore", "shared-try-room")).await, 2);
    assert_eq!(keys_in(&mut raw, &queue("rwlock", "shared-try")).await, 1);
    // Different limits for one semaphore are refused, naming both.
    let err = fails_with(ErrorKind::InvalidConfig, "another limit", b.try_permit("shared-try-room", 5).await);
    assert!(err.to_string().contains("limit of 2") && err.to_string().contains("not 5"), "{err}");
    for guard in [held, more, second, writer] {
        guard.release().await.expect("release");
    }
}

/// Counts, per queue key, how often its waiter was woken to re-read the
/// queue (the backend's `woken: re-reading the queue` event).
#[derive(Clone, Default)]
struct Wakeups(Arc<Mutex<HashMap<String, usize>>>);

impl Wakeups {
    fn of(&self, key: &str) -> usize {
        self.0.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

#[derive(Default)]
struct WakeFields {
    message: String,
    key: String,
}

impl tracing::field::Visit for WakeFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "key" {
            value.clone_into(&mut self.key);
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "key" if self.key.is_empty() => self.key = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Wakeups {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = WakeFields::default();
        event.record(&mut fields);
        if fields.message == "woken: re-reading the queue" {
            *self.0.lock().unwrap().entry(fields.key).or_default() += 1;
        }
    }
}

/// Starts a waiter for a permit of `name` (limit 2) and returns it with
/// its queue key, once that key is written.
async fn queued_permit(
    client: EtcdBackend,
    name: &'static str,
    puts: &mut etcd_client::WatchStream,
) -> (tokio::task::JoinHandle<LockGuard>, String) {
    let task = tokio::spawn(async move { client.permit(name, 2).await.expect("a permit") });
    (task, next_put_key(puts).await)
}

#[tokio::test]
async fn a_waiter_wakes_only_when_an_entry_it_waits_for_leaves() {
    use tracing_subscriber::layer::SubscriberExt;
    let wakeups = Wakeups::default();
    // The tests' runtime runs every task on this thread.
    let _events = tracing::subscriber::set_default(tracing_subscriber::registry().with(wakeups.clone()));
    let cluster = start_cluster(1).await;
    let name = "shared-wakeups";
    let mut raw = raw_client(&cluster).await;
    let mut puts = watch_queue(&mut raw, &queue("semaphore", name)).await;
    // A and B hold both permits; C waits on A and B, D on B and C, E on C
    // and D.
    let a = backend(&cluster).await.try_permit(name, 2).await.expect("A");
    next_put_key(&mut puts).await;
    let b = backend(&cluster).await.try_permit(name, 2).await.expect("B");
    next_put_key(&mut puts).await;
    let (c, c_key) = queued_permit(backend(&cluster).await, name, &mut puts).await;
    let (d, d_key) = queued_permit(backend(&cluster).await, name, &mut puts).await;
    let (e, e_key) = queued_permit(backend(&cluster).await, name, &mut puts).await;

    // A leaves: only C, which waits on it, wakes (and gets in beside B).
    a.release().await.expect("release A");
    let c = joined(SLACK, "C after A left", c).await;
    assert_eq!(wakeups.of(&c_key), 1);
    // B leaves: only D wakes (and gets in beside C).
    b.release().await.expect("release B");
    let d = joined(SLACK, "D after B left", d).await;
    assert_eq!(wakeups.of(&d_key), 1);
    // C leaves: E wakes for the first time. Had A's or B's departure woken
    // it, those wake-ups (earlier on its watch stream) would count too.
    c.release().await.expect("release C");
    let e = joined(SLACK, "E after C left", e).await;
    assert_eq!(
        (wakeups.of(&c_key), wakeups.of(&d_key), wakeups.of(&e_key)),
        (1, 1, 1),
        "each waiter woke once, for the departure that let it in"
    );
    d.release().await.expect("release D");
    e.release().await.expect("release E");
}
