//! The operator's view on a real standalone server: holder descriptions
//! stored as node data, breaking a lock (the holder learns `Revoked`, a
//! session expired from outside stays `Expired`), and listing Curator
//! paths.

mod support;

use distlock_zk::ClientConfig;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Candidacy, ElectionBackend, ErrorKind, LockBackend, LockBackendExt, LockName,
    LostReason, Primitive, Wait,
};
use distlock_testkit::assert::{
    acquired_and_released, evicts, fails_with, joined, spawn_acquire, token_after,
};
use distlock_zk::{NodeLayout, ZkBackend, zk};
use tokio::time::timeout;

use support::{
    Proxied, Standalone, config, connect, proxied, standalone, until_watches, wait_until,
};

const SESSION: Duration = Duration::from_secs(2);
/// How long any expected event may take beyond its protocol bound.
const SLACK: Duration = Duration::from_secs(3);

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_holder_is_the_node_data_and_a_label_wins() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let backend = ZkBackend::connect(config(addrs, "/held", SESSION).with_holder("billing-3"))
        .await
        .expect("connect");
    let configured = backend.lock("configured").await.expect("lock");
    let labelled = backend
        .acquire(&name("labelled"), &AcquireOptions::new().holder("nightly"))
        .await
        .expect("lock");
    for (guard, expected) in [(&configured, "billing-3"), (&labelled, "nightly")] {
        let (data, _) = admin.get_data(guard.key()).await.expect("read the node");
        assert_eq!(data, expected.as_bytes(), "{}", guard.key());
        let status = backend.inspect(guard.name()).await.expect("inspect");
        let holder = status.holder.expect("held");
        assert_eq!(holder.description.as_deref(), Some(expected));
        assert_eq!(holder.key, guard.key());
    }
    let err = backend
        .acquire(&name("empty"), &AcquireOptions::new().holder(" "))
        .await
        .expect_err("an empty label is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("empty"), "{err}");
    configured.release().await.expect("release");
    labelled.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_holder_learns_revoked_and_the_waiter_gets_in_with_a_higher_token() {
    let Standalone { addrs, .. } = &standalone().await;
    let (holder, waiter, operator) = (
        connect(addrs, "/broken", SESSION).await,
        connect(addrs, "/broken", SESSION).await,
        connect(addrs, "/broken", SESSION).await,
    );
    let lock = name("stuck");
    let guard = holder
        .acquire(&lock, &AcquireOptions::new().holder("stuck-worker"))
        .await
        .expect("lock");
    let options = AcquireOptions::new()
        .holder("next-worker")
        .wait(Wait::Timeout(SLACK * 3));
    let queued = spawn_acquire(waiter, &lock, options);
    // The holder's own-node watch, the waiter's on its predecessor and the
    // waiter's own: the deletion is then learnt from the watch.
    until_watches(&addrs[0], 3, SLACK).await;
    let status = operator.inspect(&lock).await.expect("inspect");
    assert_eq!(status.waiting, 1, "{status:?}");
    assert_eq!(
        status.waiters[0].description.as_deref(),
        Some("next-worker")
    );
    let evicted = evicts(&operator, &lock).await;
    assert_eq!(evicted.token, guard.token());
    assert_eq!(evicted.description.as_deref(), Some("stuck-worker"));
    let reason = timeout(SLACK, guard.lost()).await.expect("lost signal");
    assert_eq!(reason, LostReason::Revoked);
    let next = joined(SLACK * 4, "the waiter gets in", queued)
        .await
        .expect("the waiter acquires");
    token_after(evicted.token, next.token());
    fails_with(
        ErrorKind::LeaseLost,
        "the broken guard holds nothing",
        guard.release().await,
    );
    assert!(next.is_held());
    let status = operator.inspect(&lock).await.expect("inspect");
    assert_eq!(status.holder.map(|h| h.token), Some(next.token()));
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_expired_from_outside_stays_expired() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    // Long enough that the lock stays vouched for while its connection is
    // cut for the few round trips below.
    let session = Duration::from_secs(6);
    let Proxied { backend, proxy } = proxied(&addrs[0], "/expired", session).await;
    let guard = backend.lock("held").await.expect("lock");
    until_watches(&addrs[0], 1, SLACK).await;
    // Cut the holder off (so it cannot win its session back), take the
    // session over with its id and password and close it: the server ends
    // the session and deletes its node.
    proxy.cut();
    let thief = zk::Client::connector()
        .with_session_timeout(session)
        .with_connection_timeout(SLACK)
        .with_session(backend.client().into_session())
        .connect(&addrs[0])
        .await
        .expect("take the session over");
    drop(thief);
    let key = guard.key().to_owned();
    wait_until(SLACK, "the closed session's node is gone", async || {
        admin.check_stat(&key).await.expect("stat").is_none()
    })
    .await;
    assert!(guard.lost_signal().reason().is_none(), "lost too early");
    proxy.restore();
    let reason = timeout(session + SLACK, guard.lost())
        .await
        .expect("lost signal");
    assert_eq!(reason, LostReason::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_paths_are_listed_inspected_and_broken_under_a_prefix() {
    let Standalone { addrs, .. } = &standalone().await;
    let curator = || async {
        ZkBackend::connect(config(addrs, "/", SESSION).with_layout(NodeLayout::Curator))
            .await
            .expect("connect with layout=curator")
    };
    let (client, operator) = (curator().await, curator().await);
    let mut guards = Vec::new();
    for path in ["/ops/locks/a", "/ops/locks/b/c", "/opsother/x"] {
        guards.push(client.lock(path).await.expect("lock"));
    }
    let leadership = client
        .campaign(&name("/ops/leader"), Candidacy::new("me"))
        .await
        .expect("campaign");
    let listed = operator.list_all("/ops/").await.expect("list");
    let entries: Vec<_> = listed
        .iter()
        .map(|l| (l.primitive, l.name.as_str(), l.holder_token))
        .collect();
    assert_eq!(
        entries,
        [
            (Primitive::Lock, "/ops/locks/a", Some(guards[0].token())),
            (Primitive::Lock, "/ops/locks/b/c", Some(guards[1].token())),
            (Primitive::Election, "/ops/leader", Some(leadership.token())),
        ],
        "{listed:?}"
    );
    assert_eq!(
        operator.list_all("/ops/locks/b").await.expect("list").len(),
        1
    );
    assert!(operator.list_all("ops").await.expect("list").is_empty());
    let status = operator
        .inspect(&name("/ops/locks/a"))
        .await
        .expect("inspect");
    assert_eq!(
        status.holder.map(|h| h.key).as_deref(),
        Some(guards[0].key())
    );
    let evicted = evicts(&operator, &name("/ops/locks/a")).await;
    assert_eq!(evicted.token, guards[0].token());
    let reason = timeout(SESSION + SLACK, guards[0].lost())
        .await
        .expect("lost signal");
    assert_eq!(reason, LostReason::Revoked);
    wait_until(SLACK, "the broken lock leaves the listing", async || {
        operator.list_all("/ops/locks/").await.expect("list").len() == 1
    })
    .await;
    leadership.resign().await.expect("resign");
    for guard in guards.into_iter().skip(1) {
        guard.release().await.expect("release");
    }
}

/// The spans created while it is the thread's subscriber: each name with
/// its `backend` field.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Seen>>>);

/// A span's name and its `backend` field.
type Seen = (String, Option<String>);

/// Picks the `backend` field out of a span's fields.
struct BackendField(Option<String>);

impl tracing::field::Visit for BackendField {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "backend" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "backend" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut backend = BackendField(None);
        attrs.record(&mut backend);
        let name = attrs.metadata().name().to_owned();
        self.0.lock().unwrap().push((name, backend.0));
    }
}

/// On the current thread only, so that the subscriber sees every span.
#[tokio::test(flavor = "current_thread")]
async fn locks_and_campaigns_are_traced_once_as_distlock_acquire() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = Spans::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let server = support::start_zk(1).await;
    let backend = connect(&server.addrs(), "/traced", SESSION).await;
    acquired_and_released("lock", backend.lock("traced")).await;
    backend
        .campaign(&name("traced"), Candidacy::new("me"))
        .await
        .expect("campaign")
        .resign()
        .await
        .expect("resign");
    let seen = spans.0.lock().unwrap().clone();
    let acquires: Vec<_> = seen
        .iter()
        .filter(|(name, _)| name == "distlock.acquire")
        .collect();
    assert_eq!(acquires.len(), 2, "{seen:?}");
    assert!(
        acquires.iter().all(|(_, b)| b.as_deref() == Some("zk")),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|(name, _)| name.starts_with("zk.")),
        "no backend span duplicates it: {seen:?}"
    );
}
