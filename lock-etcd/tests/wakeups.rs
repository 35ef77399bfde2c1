//! A waiter of a semaphore wakes only when an entry it waits for leaves:
//! counted from the backend's `woken: re-reading the queue` events. A test
//! binary of its own, so its subscriber is the process's only one.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_core::{LockBackendExt, LockGuard};
use lock_etcd::EtcdBackend;
use lock_testkit::assert::joined;
use support::{backend, next_put_key, raw_client, shared_queue, start_cluster, watch_queue};

const SLACK: Duration = Duration::from_secs(10);

/// Counts, per queue key, how often its waiter was woken to re-read the
/// queue (the backend's `woken: re-reading the queue` event).
#[derive(Clone, Default)]
struct Wakeups(Arc<Mutex<HashMap<String, usize>>>);

/// The process's wake-up counter, installed as its tracing subscriber.
fn wakeups() -> Wakeups {
    static WAKEUPS: OnceLock<Wakeups> = OnceLock::new();
    WAKEUPS
        .get_or_init(|| {
            use tracing_subscriber::layer::SubscriberExt;
            let wakeups = Wakeups::default();
            tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(wakeups.clone()),
            )
            .expect("the only subscriber");
            wakeups
        })
        .clone()
}

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
    let wakeups = wakeups();
    let cluster = start_cluster(1).await;
    let name = "shared-wakeups";
    let mut raw = raw_client(&cluster).await;
    let mut puts = watch_queue(&mut raw, &shared_queue("semaphore", name)).await;
    // A and B hold both permits; C waits on A and B, D on B and C, E on C
    // and D.
    let a = backend(&cluster)
        .await
        .try_permit(name, 2)
        .await
        .expect("A");
    next_put_key(&mut puts).await;
    let b = backend(&cluster)
        .await
        .try_permit(name, 2)
        .await
        .expect("B");
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
