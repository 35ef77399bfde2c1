//! The operator's view on real servers beyond the conformance suite: the
//! configured holder label, the holder record's lifetime, the queue as
//! inspect shows it, breaking a lock with waiters, Redlock's majority view,
//! and listing under a prefix with glob characters.

mod support;

use std::time::{Duration, SystemTime};

use distlock_core::{AcquireOptions, LockBackend, LockBackendExt, LockGuard, LockName, LostReason};
use distlock_redis::RedisBackend;
use distlock_testkit::assert::{evicts, inspect_until, joined, spawn_acquire, token_after, within};
use distlock_testkit::servers::{RedisServer, RespReply};
use support::TTL;

/// Generous bound on anything that should happen at once.
const SOON: Duration = Duration::from_secs(5);

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid name")
}

fn labelled(label: &str) -> AcquireOptions {
    AcquireOptions::new().holder(label)
}

/// `client`'s grant of `lock`, described by `label`.
async fn hold(client: &impl LockBackend, lock: &LockName, label: &str) -> LockGuard {
    client.acquire(lock, &labelled(label)).await.expect("lock")
}

async fn integer(server: &RedisServer, args: &[&str]) -> i64 {
    match server.command(args).await.expect("redis command") {
        RespReply::Integer(n) => n,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

#[tokio::test]
async fn the_configured_holder_describes_grants_unless_the_acquire_has_its_own() {
    let server = support::start_redis().await;
    let configured = RedisBackend::connect_url(&format!(
        "redis://127.0.0.1:{}?holder=billing-worker-3&ttl=600ms",
        server.port()
    ))
    .await
    .expect("connect");
    let observer = support::client(&server).await;
    let (plain, own) = (name("admin/holder/plain"), name("admin/holder/own"));
    let a = configured
        .acquire(&plain, &AcquireOptions::new())
        .await
        .expect("lock");
    let b = hold(&configured, &own, "per-acquire").await;
    for (lock, expected) in [(&plain, "billing-worker-3"), (&own, "per-acquire")] {
        let status = observer.inspect(lock).await.expect("inspect");
        let holder = status.holder.expect("held");
        assert_eq!(holder.description.as_deref(), Some(expected), "{lock}");
    }
    a.release().await.expect("release");
    b.release().await.expect("release");
}

/// The holder record is the owner key's value, so it cannot outlive the
/// lock or be missing while the lock is held: across renewals it keeps the
/// grant's token and description, and it goes with the key.
#[tokio::test]
async fn the_holder_record_is_the_owner_key() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let lock = name("admin/record");
    let owner_key = "distlock:lock:{admin/record}:owner";
    let guard = hold(&client, &lock, "short lived").await;
    for _ in 0..3 {
        tokio::time::sleep(TTL / 2).await;
        let record = match server.command(&["GET", owner_key]).await.expect("GET") {
            RespReply::Bulk(Some(record)) => record,
            other => panic!("no holder record: {other:?}"),
        };
        let fields: Vec<&str> = record.splitn(6, ' ').collect();
        assert_eq!(fields.len(), 6, "{record:?}");
        assert_eq!(fields[1], guard.token().to_string(), "token in {record:?}");
        assert_eq!(fields[2], "c", "a final grant nobody waits for: {record:?}");
        assert_eq!(fields[5], "short lived", "description in {record:?}");
        assert!(integer(&server, &["PTTL", owner_key]).await > 0);
    }
    guard.abandon();
    within(TTL * 3, "the abandoned owner key expires", async {
        while integer(&server, &["EXISTS", owner_key]).await == 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let status = client.inspect(&lock).await.expect("inspect");
    assert!(!status.is_held(), "{status:?}");
}

#[tokio::test]
async fn breaking_a_lock_hands_it_to_the_first_waiter_and_revokes_the_holder() {
    let server = support::start_redis().await;
    let (holder, operator) = (
        support::client(&server).await,
        support::client(&server).await,
    );
    let lock = name("admin/queue");
    let stuck = hold(&holder, &lock, "stuck").await;
    let mut waiters = Vec::new();
    for (i, label) in ["first", "second"].into_iter().enumerate() {
        let client = support::client(&server).await;
        waiters.push(spawn_acquire(client, &lock, labelled(label)));
        inspect_until(&operator, &lock, SOON, "the waiter queues", |s| {
            s.waiting == i + 1
        })
        .await;
    }
    let status = operator.inspect(&lock).await.expect("inspect");
    let labels: Vec<_> = status
        .waiters
        .iter()
        .map(|w| w.description.as_deref())
        .collect();
    assert_eq!(labels, [Some("first"), Some("second")], "{status:?}");
    let since = status
        .holder
        .as_ref()
        .and_then(|h| h.acquired_at)
        .expect("grant time");
    let age = SystemTime::now().duration_since(since).unwrap_or_default();
    assert!(age < Duration::from_secs(30), "acquired {age:?} ago");

    let evicted = evicts(&operator, &lock).await;
    assert_eq!(
        (evicted.token, evicted.description.as_deref()),
        (stuck.token(), Some("stuck"))
    );
    let first = joined(SOON, "the first waiter gets the lock", waiters.remove(0))
        .await
        .expect("first waiter acquires");
    token_after(evicted.token, first.token());
    // The evicted holder learns it at its next renewal, every TTL/3.
    let reason = within(TTL, "the evicted holder's lost signal", stuck.lost()).await;
    assert_eq!(reason, LostReason::Revoked);
    let status = operator.inspect(&lock).await.expect("inspect");
    assert_eq!(status.holder.map(|h| h.token), Some(first.token()));
    assert_eq!(status.waiting, 1, "the second waiter keeps its place");
    assert!(
        stuck.release().await.is_err(),
        "the evicted guard holds nothing"
    );
    assert!(first.is_held());
    first.release().await.expect("release");
    let second = joined(SOON, "the second waiter follows", waiters.remove(0))
        .await
        .expect("second waiter acquires");
    second.release().await.expect("release");
}

#[tokio::test]
async fn redlock_reports_the_holder_a_majority_shows() {
    let servers = support::start_redises(3).await;
    let (holder, observer) = (
        support::redlock_client(&servers).await,
        support::redlock_client(&servers).await,
    );
    let lock = name("admin/redlock");
    let guard = hold(&holder, &lock, "redlock-holder").await;
    let waiter = support::redlock_client(&servers).await;
    let queued = spawn_acquire(waiter, &lock, labelled("redlock-waiter"));
    let status = inspect_until(&observer, &lock, SOON, "the waiter registers", |s| {
        s.waiting == 1
    })
    .await;
    let shown = status.holder.clone().expect("held");
    assert_eq!(shown.token, guard.token(), "{status:?}");
    assert_eq!(shown.description.as_deref(), Some("redlock-holder"));
    assert!(shown.lease_left.expect("lease left") <= TTL, "{shown:?}");
    assert!(shown.acquired_at.is_some(), "{shown:?}");
    assert_eq!(
        status.waiters[0].description.as_deref(),
        Some("redlock-waiter"),
        "{status:?}"
    );
    // One server losing the key leaves a majority; a second does not.
    guard.abandon();
    let owner_key = "distlock:lock:{admin/redlock}:owner";
    for (server, shown_after) in [(0, Some(shown.token)), (1, None)] {
        servers
            .server(server)
            .command(&["DEL", owner_key])
            .await
            .expect("DEL");
        let status = observer.inspect(&lock).await.expect("inspect");
        assert_eq!(
            status.holder.as_ref().map(|h| h.token),
            shown_after,
            "after DEL on server {server}: {status:?}"
        );
    }
    let next = joined(SOON, "the waiter gets in", queued)
        .await
        .expect("waiter acquires");
    assert!(next.token() > shown.token);
    let status = inspect_until(&observer, &lock, SOON, "the served waiter is gone", |s| {
        s.waiting == 0
    })
    .await;
    assert_eq!(status.holder.map(|h| h.token), Some(next.token()));
    next.release().await.expect("release");
}

#[tokio::test]
async fn listing_takes_the_prefix_literally() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let mut guards = Vec::new();
    for text in ["admin/st*r/a", "admin/stXr/b", "admin/st*r"] {
        guards.push(client.lock(text).await.expect("lock"));
    }
    let listed = client.list_all("admin/st*r/").await.expect("list");
    let names: Vec<_> = listed.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["admin/st*r/a"], "{listed:?}");
    for guard in guards {
        guard.release().await.expect("release");
    }
    assert!(client.list_all("admin/").await.expect("list").is_empty());
}
