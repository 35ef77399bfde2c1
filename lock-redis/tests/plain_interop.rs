//! The plain layout shares its locks with redis-py's `Lock` and
//! node-redlock, each in a process of its own: whoever holds the key, the
//! others wait or are refused; a lock left by a killed process expires and
//! is taken; and distlock's owner checks never release or renew a key
//! another client holds. Every wait is on an answer or a key's state, with
//! a timeout.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt, LostReason};
use distlock_testkit::assert::within;
use distlock_testkit::lock_peer::{Library, LockPeer};
use distlock_testkit::servers::{RedisServer, RespReply};
use support::{TTL, plain_client, start_redis};

/// A bound on anything that should happen promptly.
const BOUND: Duration = Duration::from_secs(10);

/// The value of `key` now, `None` when absent.
async fn value_of(server: &RedisServer, key: &str) -> Option<String> {
    match server.command(&["GET", key]).await.expect("GET") {
        RespReply::Bulk(value) => value,
        other => panic!("GET {key}: {other:?}"),
    }
}

/// The lease left on `key`, in milliseconds.
async fn pttl(server: &RedisServer, key: &str) -> i64 {
    match server.command(&["PTTL", key]).await.expect("PTTL") {
        RespReply::Integer(ms) => ms,
        other => panic!("PTTL {key}: {other:?}"),
    }
}

/// Waits until `key`'s sorted set has `n` members.
async fn until_members(server: &RedisServer, key: &str, n: i64) {
    within(BOUND, "the waiter registers", async {
        while server.command(&["ZCARD", key]).await.expect("ZCARD") != RespReply::Integer(n) {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

async fn distlock_holds_and_the_peer_is_refused(library: Library) {
    let server = start_redis().await;
    let client = plain_client(&server).await;
    let guard = client.lock("jobs").await.expect("lock");
    assert_eq!(guard.key(), "jobs", "the bare name is the key");
    let mut peer = LockPeer::start(library, server.port(), "jobs", Duration::from_secs(5));
    assert_eq!(
        peer.ask("try"),
        "busy",
        "{library:?} got a lock distlock holds"
    );
    guard.release().await.expect("release");
    assert_eq!(peer.ask("try"), "acquired");
    assert_eq!(value_of(&server, "jobs").await, Some(peer.ask("value")));
    assert_eq!(peer.ask("release"), "released");
}

async fn the_peer_holds_and_distlock_waits_until_it_releases(library: Library) {
    let server = start_redis().await;
    let client = plain_client(&server).await;
    let mut peer = LockPeer::start(library, server.port(), "jobs", Duration::from_secs(5));
    assert_eq!(peer.ask("try"), "acquired");
    let theirs = peer.ask("value");
    let err = client
        .try_lock("jobs")
        .await
        .expect_err("the peer holds it");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { client.lock("jobs").await }
    });
    until_members(&server, "distlock:plain:{jobs}:waiters", 1).await;
    assert_eq!(value_of(&server, "jobs").await.as_ref(), Some(&theirs));
    assert!(
        !waiting.is_finished(),
        "distlock got in while {library:?} held it"
    );
    assert_eq!(peer.ask("release"), "released");
    let guard = within(BOUND, "distlock gets in after the release", waiting)
        .await
        .expect("task")
        .expect("lock");
    assert_ne!(value_of(&server, "jobs").await, Some(theirs));
    assert_eq!(peer.ask("try"), "busy");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_distlock_holds_refuses_redis_py() {
    distlock_holds_and_the_peer_is_refused(Library::RedisPy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_redis_py_holds_keeps_distlock_waiting_until_released() {
    the_peer_holds_and_distlock_waits_until_it_releases(Library::RedisPy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_distlock_holds_refuses_node_redlock() {
    distlock_holds_and_the_peer_is_refused(Library::NodeRedlock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_node_redlock_holds_keeps_distlock_waiting_until_released() {
    the_peer_holds_and_distlock_waits_until_it_releases(Library::NodeRedlock).await;
}

/// A redis-py process killed while holding leaves its key to its TTL;
/// distlock gets the lock once the key has expired, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_of_a_killed_redis_py_process_expires_and_distlock_takes_it() {
    let server = start_redis().await;
    let client = plain_client(&server).await;
    let peer_ttl = Duration::from_millis(1500);
    let mut peer = LockPeer::start(Library::RedisPy, server.port(), "jobs", peer_ttl);
    assert_eq!(peer.ask("try"), "acquired");
    let theirs = peer.ask("value");
    peer.kill();
    let err = client
        .try_lock("jobs")
        .await
        .expect_err("the key outlives its process");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert_eq!(value_of(&server, "jobs").await.as_ref(), Some(&theirs));
    let guard = client
        .lock_timeout("jobs", peer_ttl + BOUND)
        .await
        .expect("lock after expiry");
    let ours = value_of(&server, "jobs").await.expect("our key");
    assert_ne!(ours, theirs);
    assert!(guard.is_held());
    guard.release().await.expect("release");
    assert_eq!(value_of(&server, "jobs").await, None);
}

/// distlock's lease of `jobs` ends (its key goes, as on expiry) and
/// redis-py takes the key: distlock's release deletes nothing, and its
/// renewal neither extends redis-py's key nor keeps the guard held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distlock_never_releases_or_renews_a_key_redis_py_took_over() {
    let server = start_redis().await;
    let client = plain_client(&server).await;
    let peer_ttl = Duration::from_secs(20);
    let mut peer = LockPeer::start(Library::RedisPy, server.port(), "jobs", peer_ttl);

    // Released before its renewal noticed.
    let guard = client.lock("jobs").await.expect("lock");
    assert_eq!(
        server.command(&["DEL", "jobs"]).await.expect("DEL"),
        RespReply::Integer(1)
    );
    assert_eq!(peer.ask("try"), "acquired");
    let theirs = peer.ask("value");
    let err = guard.release().await.expect_err("the key is redis-py's");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(value_of(&server, "jobs").await.as_ref(), Some(&theirs));
    assert_eq!(peer.ask("release"), "released");

    // Renewed after redis-py took the key: the renewal finds it not ours.
    let guard = client.lock("jobs").await.expect("lock");
    assert_eq!(
        server.command(&["DEL", "jobs"]).await.expect("DEL"),
        RespReply::Integer(1)
    );
    assert_eq!(peer.ask("try"), "acquired");
    let theirs = peer.ask("value");
    let before = pttl(&server, "jobs").await;
    let reason = within(TTL * 2 + BOUND, "the lost signal", guard.lost()).await;
    assert!(
        matches!(
            reason,
            LostReason::RenewalFailed(_) | LostReason::Expired | LostReason::Deleted
        ),
        "{reason:?}"
    );
    assert!(!guard.is_held());
    assert_eq!(value_of(&server, "jobs").await.as_ref(), Some(&theirs));
    let after = pttl(&server, "jobs").await;
    assert!(
        after <= before && after > 0,
        "redis-py's key was extended or lost: PTTL {before} then {after}"
    );
    assert_eq!(
        peer.ask("extend"),
        "extended",
        "redis-py still owns its key"
    );
    assert_eq!(peer.ask("release"), "released");
}
