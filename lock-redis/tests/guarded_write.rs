//! Guarded writes on real servers: a holder whose lease ran out on the
//! server writes late and is refused, while the next holder (with a higher
//! token) writes; a Redis Cluster refuses keys outside the lock's hash tag;
//! Redlock has none.

mod support;

use std::time::Duration;

use distlock_core::{
    Access, AcquireOptions, ElectionBackendExt, ErrorKind, LockBackend, LockBackendExt, LockName,
};
use distlock_redis::GuardedScript;
use distlock_testkit::assert::within;
use distlock_testkit::servers::{RedisServer, RespReply};
use support::cluster::{cluster_client, delete_on_its_master, start_cluster};

/// Long enough that no renewal runs during a test: the guard goes on
/// believing it holds the lock after its key expired on the server.
const LONG_TTL: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(10);

/// `name` locked on `backend` for [`LONG_TTL`].
async fn lock_long(backend: &impl LockBackend, name: &str) -> distlock_core::LockGuard {
    let name = LockName::new(name).unwrap();
    let options = AcquireOptions::new().ttl(LONG_TTL);
    backend
        .acquire(&name, &options)
        .await
        .expect("first holder")
}

async fn get(server: &RedisServer, key: &str) -> Option<String> {
    match server.command(&["GET", key]).await.expect("GET") {
        RespReply::Bulk(value) => value,
        other => panic!("GET {key}: {other:?}"),
    }
}

#[tokio::test]
async fn redis_refuses_a_late_write_of_a_holder_whose_lease_ran_out() {
    let server = support::start_redis().await;
    let (a, b) = (
        support::client(&server).await,
        support::client(&server).await,
    );
    assert!(a.capabilities().guarded_writes);
    let name = "guarded/paused";
    let first = lock_long(&a, name).await;
    a.guarded_put(&first, "report", "one")
        .await
        .expect("guarded put while held");
    assert_eq!(get(&server, "report").await.as_deref(), Some("one"));
    let err = a
        .guarded_put(&first, first.key(), "mine")
        .await
        .expect_err("the lock's own key is not data");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains(first.key()), "{err}");
    assert!(a.is_owner(&first).await.expect("is_owner"));

    // The first holder pauses past its lease: the server expires its key.
    server
        .command(&["PEXPIRE", first.key(), "1"])
        .await
        .expect("PEXPIRE");
    let second = within(BOUND, "the next holder", b.lock(name))
        .await
        .expect("second holder");
    assert!(
        second.token() > first.token(),
        "token {} after {}",
        second.token(),
        first.token()
    );
    assert!(first.is_held(), "the paused holder has not noticed");

    let late = a.guarded_put(&first, "report", "late").await;
    let err = late.expect_err("the server refuses the late write");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(err.message().contains("nothing was written"), "{err}");
    assert_eq!(get(&server, "report").await.as_deref(), Some("one"));
    assert!(!a.is_owner(&first).await.expect("is_owner"));
    let err = a.guarded_delete(&first, "report").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");

    b.guarded_put(&second, "report", "two")
        .await
        .expect("the next holder writes");
    assert_eq!(get(&server, "report").await.as_deref(), Some("two"));
    let add = GuardedScript::new("return redis.call('INCRBY', KEYS[1], ARGV[1])");
    let total: i64 = b
        .guarded_eval(&second, &add, &["count"], &[b"5"])
        .await
        .expect("guarded script");
    assert_eq!(total, 5);
    let err = a
        .guarded_eval::<i64>(&first, &add, &["count"], &[b"5"])
        .await
        .expect_err("the late script is refused");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(get(&server, "count").await.as_deref(), Some("5"));
    assert!(b.guarded_delete(&second, "report").await.expect("delete"));
    assert!(!b.guarded_delete(&second, "report").await.expect("delete"));
    second.release().await.expect("release");
    drop(first);
}

#[tokio::test]
async fn redis_guards_writes_by_leadership_and_refuses_shared_guards() {
    let server = support::start_redis().await;
    let backend = support::client(&server).await;
    let leadership = backend
        .elect("guarded/leader", "me")
        .await
        .expect("leadership");
    backend
        .guarded_put(leadership.guard(), "leader-note", "hi")
        .await
        .expect("guarded put as leader");
    assert_eq!(get(&server, "leader-note").await.as_deref(), Some("hi"));
    leadership.resign().await.expect("resign");

    let name = LockName::new("guarded/semaphore").unwrap();
    let permit = backend
        .acquire_as(&name, Access::permit(2).unwrap(), &AcquireOptions::new())
        .await
        .expect("permit");
    let err = backend
        .guarded_put(&permit, "x", "y")
        .await
        .expect_err("a permit guards nothing");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("semaphore permit"), "{err}");
    assert_eq!(get(&server, "x").await, None);
    permit.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_writes_keys_of_the_lock_slot_only_and_refuses_a_late_holder() {
    let cluster = start_cluster(3, 0).await;
    let (a, b) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    assert!(a.capabilities().guarded_writes);
    let name = "guarded/cluster";
    let first = lock_long(&a, name).await;
    let data = "app:{guarded/cluster}:data";
    a.guarded_put(&first, data, "one")
        .await
        .expect("a key with the lock's hash tag");
    let err = a
        .guarded_put(&first, "app:other", "one")
        .await
        .expect_err("a key of another slot");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        err.message().contains("app:other") && err.message().contains("{guarded/cluster}"),
        "{err}"
    );

    delete_on_its_master(&cluster, first.key()).await;
    let second = within(BOUND, "the next holder", b.lock(name))
        .await
        .expect("second holder");
    assert!(second.token() > first.token());
    let err = a.guarded_put(&first, data, "late").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    b.guarded_put(&second, data, "two")
        .await
        .expect("the next holder writes");
    let master = cluster.master_for_key(data).await.expect("master");
    assert_eq!(
        master.command(&["GET", data]).await.expect("GET"),
        RespReply::Bulk(Some("two".into()))
    );
    second.release().await.expect("release");
    drop(first);
}

#[tokio::test]
async fn redlock_has_no_guarded_writes_and_says_why() {
    let servers = support::start_redises(3).await;
    let redlock = support::redlock_client(&servers).await;
    assert!(!redlock.capabilities().guarded_writes);
    let guard = redlock.lock("guarded/redlock").await.expect("lock");
    let err = redlock
        .guarded_put(&guard, "report", "one")
        .await
        .expect_err("Redlock cannot guard a write");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.message().contains("majority"), "{err}");
    let err = redlock.is_owner(&guard).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    guard.release().await.expect("release");
}
