//! The operator's view on etcd: inspect, list and force_release against a
//! real server, beyond what the conformance suite checks.

mod support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, Candidacy, ElectionBackend, ErrorKind, ListOptions, LockBackend,
    LockBackendExt, LockName, LostReason, Primitive, Wait,
};
use distlock_etcd::{EtcdBackend, EtcdConfig};
use distlock_testkit::assert::{evicts, holders_listed, inspect_until, joined, spawn_acquire};
use tokio::time::timeout;

const SLACK: Duration = Duration::from_secs(3);

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

/// Polls `inspect` until `waiting` clients wait for `lock`, within [`SLACK`].
async fn until_waiting(backend: &EtcdBackend, lock: &LockName, waiting: usize) {
    let what = format!("{waiting} waiting for {lock}");
    inspect_until(backend, lock, SLACK, &what, |s| s.waiting == waiting).await;
}

#[tokio::test]
async fn inspect_lists_the_waiters_in_queue_order_with_their_descriptions() {
    let cluster = support::start_cluster(1).await;
    let backend = support::backend(&cluster).await;
    let lock = name("ops/queue");
    let holder = backend
        .acquire(&lock, &AcquireOptions::new().holder("first"))
        .await
        .expect("lock");
    let mut waiters = Vec::new();
    for (i, label) in ["second", "third", "fourth"].into_iter().enumerate() {
        let options = AcquireOptions::new().holder(label);
        waiters.push(spawn_acquire(backend.clone(), &lock, options));
        // Queue order is join order: wait until this one has joined.
        until_waiting(&backend, &lock, i + 1).await;
    }
    let status = backend.inspect(&lock).await.expect("inspect");
    let shown = status.holder.as_ref().expect("held");
    assert_eq!(shown.token, holder.token());
    assert_eq!(shown.key, holder.key());
    assert_eq!(shown.description.as_deref(), Some("first"));
    assert_eq!(shown.acquired_at, None, "etcd declares no acquired_at");
    let left = shown.lease_left.expect("lease left");
    assert!(left <= holder.ttl(), "{left:?} of {:?}", holder.ttl());
    let described: Vec<_> = status
        .waiters
        .iter()
        .map(|w| w.description.as_deref())
        .collect();
    assert_eq!(
        described,
        [Some("second"), Some("third"), Some("fourth")],
        "{status:?}"
    );
    assert!(
        status.waiters.iter().all(|w| w
            .key
            .as_deref()
            .is_some_and(|k| k.starts_with(holder.key().rsplit_once('/').unwrap().0))),
        "{status:?}"
    );
    holder.release().await.expect("release");
    let mut tokens = Vec::new();
    for waiter in waiters {
        let guard = joined(SLACK, "each waiter gets in", waiter)
            .await
            .expect("acquire");
        tokens.push(guard.token());
        guard.release().await.expect("release");
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(!backend.inspect(&lock).await.expect("inspect").is_held());
}

#[tokio::test]
async fn the_holder_setting_describes_grants_unless_the_acquire_sets_one() {
    let cluster = support::start_cluster(1).await;
    let url = format!(
        "etcd://{}/distlock-test?ttl=1s&holder=billing-worker-3",
        cluster.endpoints()[0]
    );
    let labelled = EtcdBackend::connect(EtcdConfig::from_url(&url).expect("url"))
        .await
        .expect("connect");
    let observer = support::backend(&cluster).await;
    let lock = name("ops/holder-setting");
    let guard = labelled.lock(lock.as_str()).await.expect("lock");
    let shown = observer.inspect(&lock).await.expect("inspect").holder;
    assert_eq!(
        shown.and_then(|h| h.description).as_deref(),
        Some("billing-worker-3")
    );
    guard.release().await.expect("release");
    let own = labelled
        .acquire(&lock, &AcquireOptions::new().holder("nightly-report"))
        .await
        .expect("lock");
    let shown = observer.inspect(&lock).await.expect("inspect").holder;
    assert_eq!(
        shown.and_then(|h| h.description).as_deref(),
        Some("nightly-report")
    );
    own.release().await.expect("release");
}

#[tokio::test]
async fn small_pages_list_every_name_once_with_its_holder_and_waiters() {
    let cluster = support::start_cluster(1).await;
    let backend = support::backend(&cluster).await;
    // Names whose escaped keys sort differently from the names themselves.
    let texts = [
        "ops/list/a",
        "ops/list/a.b",
        "ops/list/a/b",
        "ops/list/a%",
        "ops/list/z",
    ];
    let mut guards = Vec::new();
    for text in texts {
        guards.push(backend.lock(text).await.expect("lock"));
    }
    let outside = backend.lock("ops/other").await.expect("lock");
    let waiter = tokio::spawn({
        let backend = backend.clone();
        async move { backend.lock("ops/list/z").await }
    });
    until_waiting(&backend, &name("ops/list/z"), 1).await;
    let leadership = backend
        .campaign(&name("ops/list/leader"), Candidacy::new("value"))
        .await
        .expect("campaign");

    for limit in [1, 2, 3, 100] {
        let mut options = ListOptions::prefix("ops/list/").limit(limit);
        let mut seen = Vec::new();
        loop {
            let page = backend.list(&options).await.expect("list");
            assert!(page.locks.len() <= limit, "{page:?}");
            seen.extend(page.locks);
            match page.next {
                Some(next) => options = options.after(Some(next)),
                None => break,
            }
        }
        let mut locks: Vec<_> = seen
            .iter()
            .filter(|l| l.primitive == Primitive::Lock)
            .map(|l| (l.name.as_str(), l.holder_token, l.waiting))
            .collect();
        locks.sort();
        let mut expected: Vec<_> = texts
            .iter()
            .zip(&guards)
            .map(|(text, guard)| {
                (
                    *text,
                    Some(guard.token()),
                    usize::from(*text == "ops/list/z"),
                )
            })
            .collect();
        expected.sort();
        assert_eq!(locks, expected, "limit {limit}: {seen:?}");
        assert_eq!(
            holders_listed(&seen, Primitive::Election),
            [("ops/list/leader", Some(leadership.token()))],
            "limit {limit}"
        );
        assert_eq!(seen.len(), texts.len() + 1, "limit {limit}: {seen:?}");
    }
    let last = ListOptions::prefix("ops/list/")
        .after(Some((Primitive::Election, name("ops/list/leader"))));
    assert!(backend.list(&last).await.expect("list").locks.is_empty());
    let everything = backend.list_all("").await.expect("list all");
    assert!(everything.iter().any(|l| l.name.as_str() == "ops/other"));

    leadership.resign().await.expect("resign");
    waiter.abort();
    outside.release().await.expect("release");
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[tokio::test]
async fn breaking_a_queued_lock_hands_it_to_the_first_waiter_and_fences_the_evicted() {
    let cluster = support::start_cluster(1).await;
    let (holder, waiter, operator) = (
        support::backend(&cluster).await,
        support::backend(&cluster).await,
        support::backend(&cluster).await,
    );
    let lock = name("ops/break");
    let stuck = holder
        .acquire(&lock, &AcquireOptions::new().holder("stuck"))
        .await
        .expect("lock");
    let options = AcquireOptions::new().wait(Wait::Timeout(SLACK));
    let queued = spawn_acquire(waiter, &lock, options);
    until_waiting(&operator, &lock, 1).await;

    let evicted = evicts(&operator, &lock).await;
    assert_eq!(evicted.token, stuck.token());
    assert_eq!(evicted.key, stuck.key());
    assert_eq!(evicted.description.as_deref(), Some("stuck"));
    assert!(evicted.lease_left.is_some(), "{evicted:?}");
    let next = joined(SLACK, "the waiter gets the broken lock", queued)
        .await
        .expect("acquire");
    assert!(next.token() > evicted.token);
    // The key was deleted, the lease lives on: someone else ended it.
    let reason = timeout(SLACK, stuck.lost()).await.expect("lost signal");
    assert_eq!(reason, LostReason::Revoked);
    let err = stuck.release().await.expect_err("evicted");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    let status = operator.inspect(&lock).await.expect("inspect");
    assert_eq!(status.holder.map(|h| h.token), Some(next.token()));
    next.release().await.expect("release");
}

#[tokio::test]
async fn a_guard_whose_key_is_broken_before_its_monitor_watches_learns_it_at_release() {
    let cluster = support::start_cluster(1).await;
    let (holder, operator) = support::two_backends(&cluster).await;
    let guard = holder.lock("ops/early-break").await.expect("lock");
    // Straight after the grant: the monitor opens its watch up to 100 ms later.
    evicts(&operator, &name("ops/early-break")).await;
    let err = guard.release().await.expect_err("broken");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(err.message().contains("broken or revoked"), "{err}");
}
