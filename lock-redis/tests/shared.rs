//! Semaphores and read-write locks on a real Redis: the limit holds under
//! contention and is reached, an abandoned permit frees itself, a queued
//! writer goes before a later reader, limits must agree, and Redlock says
//! it has neither.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::{
    Access, AcquireOptions, DynLockBackend, ErrorKind, LockBackend, LockBackendExt, LockGuard, Wait,
};
use distlock_redis::DEFAULT_PREFIX;
use distlock_testkit::assert::{fails_with, fails_with_one_of, joined, token_after, within};
use distlock_testkit::servers::{RedisServer, RespReply};
use support::{TTL, client, start_redis};

/// Bound on anything that should happen about at once.
const SOON: Duration = Duration::from_secs(3);

fn waiting() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::Timeout(Duration::from_secs(30)))
}

fn permit(limit: u32) -> Access {
    Access::permit(limit).expect("a non-zero limit")
}

/// A key of the semaphore or read-write lock `name`, as the backend names it.
fn key(space: &str, name: &str, suffix: &str) -> String {
    format!("{DEFAULT_PREFIX}{space}:{{{name}}}:{suffix}")
}

/// An integer reply of `args` on `server`.
async fn count(server: &RedisServer, args: &[&str]) -> i64 {
    match server.command(args).await.expect("redis command") {
        RespReply::Integer(n) => n,
        other => panic!("{args:?}: not an integer: {other:?}"),
    }
}

/// Waits until `name`'s queue in `space` holds `len` waiters.
async fn queued(server: &RedisServer, space: &str, name: &str, len: i64) {
    let queue = key(space, name, "queue");
    within(SOON, "the waiter to queue", async {
        while count(server, &["LLEN", &queue]).await != len {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Acquires `access` of `name` in a task, waiting.
fn spawn_shared(
    client: Arc<DynLockBackend>,
    name: &'static str,
    access: Access,
) -> tokio::task::JoinHandle<LockGuard> {
    tokio::spawn(async move {
        client
            .shared_with(name, access, &waiting())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", access.as_str()))
    })
}

/// Six clients take permits of a 3-permit semaphore over and over: the
/// server never shows more than 3 holders while one is inside, no more than
/// 3 are ever inside at once, and 3 are (full use, not a mutex).
#[tokio::test]
async fn a_semaphore_of_three_admits_three_of_six_clients_and_no_more() {
    const LIMIT: u32 = 3;
    let server = Arc::new(start_redis().await);
    let name = "shared/contention";
    let holders = key("semaphore", name, "holders");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let client = client(&server).await;
        let (server, holders) = (server.clone(), holders.clone());
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let guard = client
                    .shared_with(name, permit(LIMIT), &waiting())
                    .await
                    .expect("a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= LIMIT as usize, "{now} permit holders inside");
                let on_server = count(&server, &["ZCARD", &holders]).await;
                assert!(
                    on_server <= i64::from(LIMIT),
                    "{on_server} holders on the server"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        joined(Duration::from_secs(60), "a contender", task).await;
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        LIMIT as usize,
        "the most permit holders inside at once"
    );
    assert_eq!(
        count(&server, &["EXISTS", &holders]).await,
        0,
        "all released"
    );
}

/// A permit holder that stops renewing frees its permit within its TTL: a
/// client queued on the full semaphore gets in, with a higher token.
#[tokio::test]
async fn an_abandoned_permit_frees_itself_within_its_ttl() {
    let server = start_redis().await;
    let name = "shared/abandoned";
    let (a, b): (Arc<DynLockBackend>, Arc<DynLockBackend>) = (
        Arc::new(client(&server).await),
        Arc::new(client(&server).await),
    );
    let options = AcquireOptions::new().wait(Wait::No);
    let kept = a
        .shared_with(name, permit(2), &options)
        .await
        .expect("free");
    let dead = a
        .shared_with(name, permit(2), &options)
        .await
        .expect("free");
    let waiter = spawn_shared(b, name, permit(2));
    queued(&server, "semaphore", name, 1).await;
    let token = dead.token();
    dead.abandon();
    let next = joined(TTL + SOON, "the abandoned permit", waiter).await;
    token_after(token, next.token());
    let holders = key("semaphore", name, "holders");
    assert_eq!(count(&server, &["ZCARD", &holders]).await, 2);
    for guard in [kept, next] {
        guard.release().await.expect("release");
    }
}

/// A writer queued behind a reader goes before a reader that arrives after
/// it; the later reader gets in only once the writer is done, and the
/// tokens follow the grants.
#[tokio::test]
async fn a_queued_writer_goes_before_a_later_reader() {
    let server = start_redis().await;
    let name = "shared/writer-first";
    let owner = key("rwlock", name, "owner");
    let first = client(&server).await;
    let (writer, late): (Arc<DynLockBackend>, Arc<DynLockBackend>) = (
        Arc::new(client(&server).await),
        Arc::new(client(&server).await),
    );
    let reading = first.try_read_lock(name).await.expect("the first reader");
    let writing = spawn_shared(writer, name, Access::Write);
    queued(&server, "rwlock", name, 1).await;
    let late_reader = spawn_shared(late.clone(), name, Access::Read);
    queued(&server, "rwlock", name, 2).await;
    let read_token = reading.token();
    reading.release().await.expect("release");
    let writing = joined(SOON, "the queued writer", writing).await;
    token_after(read_token, writing.token());
    // The later reader is still queued, behind a held write side.
    assert_eq!(count(&server, &["EXISTS", &owner]).await, 1);
    queued(&server, "rwlock", name, 1).await;
    assert!(
        !late_reader.is_finished(),
        "a reader got in beside the writer"
    );
    let write_token = writing.token();
    writing.release().await.expect("release");
    let reader = joined(SOON, "the later reader", late_reader).await;
    token_after(write_token, reader.token());
    reader.release().await.expect("release");
}

/// A permit asked for with another limit than the held or queued permits'
/// fails at once with `InvalidConfig` naming both limits, and leaves
/// nothing behind; once nobody holds or waits, a new limit is taken.
#[tokio::test]
async fn a_permit_with_another_limit_is_refused_naming_both() {
    let server = start_redis().await;
    let name = "shared/limits";
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.try_permit(name, 1).await.expect("the permit");
    let queued_permit = {
        let a: Arc<DynLockBackend> = Arc::new(a.clone());
        spawn_shared(a, name, permit(1))
    };
    queued(&server, "semaphore", name, 1).await;
    held.release().await.expect("release");
    let second = joined(SOON, "the queued permit", queued_permit).await;
    let err = within(
        SOON,
        "a disagreeing limit",
        b.shared_with(name, permit(4), &waiting()),
    )
    .await;
    let err = fails_with(ErrorKind::InvalidConfig, "a disagreeing limit", err);
    let message = err.to_string();
    assert!(
        message.contains("limit of 1") && message.contains("not 4"),
        "names both limits: {message}"
    );
    assert_eq!(
        count(&server, &["LLEN", &key("semaphore", name, "queue")]).await,
        0
    );
    second.release().await.expect("release");
    let fresh = b.try_permit(name, 4).await.expect("a new limit once free");
    fresh.release().await.expect("release");
}

/// The lock, the semaphore and the read-write lock of one name are three
/// things: holding one does not block the others.
#[tokio::test]
async fn a_lock_a_semaphore_and_a_rwlock_of_one_name_are_independent() {
    let server = start_redis().await;
    let backend = client(&server).await;
    let name = "shared/one-name";
    let lock = backend.try_lock(name).await.expect("the lock");
    let write = backend.try_write_lock(name).await.expect("the write side");
    let permit = backend.try_permit(name, 1).await.expect("the permit");
    for guard in [lock, write, permit] {
        guard.release().await.expect("release");
    }
}

/// A permit, a reader and a writer held for three TTLs are renewed: their
/// places stay taken all along, and each releases cleanly at the end.
#[tokio::test]
async fn shared_grants_are_renewed_across_three_ttls() {
    let server = start_redis().await;
    let (holder, other) = (client(&server).await, client(&server).await);
    let name = "shared/renewed";
    let permit = holder.try_permit(name, 1).await.expect("the permit");
    let reader = holder.try_read_lock(name).await.expect("the read side");
    let writer = holder
        .try_write_lock("shared/renewed-writer")
        .await
        .expect("the write side");
    tokio::time::sleep(TTL * 3).await;
    let still = [
        other.try_permit(name, 1).await,
        other.try_write_lock(name).await,
        other.try_read_lock("shared/renewed-writer").await,
    ];
    for result in still {
        fails_with(ErrorKind::WouldBlock, "a place held for three TTLs", result);
    }
    for guard in [permit, reader, writer] {
        assert!(!guard.lost_signal().is_lost(), "lost while renewed");
        guard.release().await.expect("release");
    }
}

/// Permits whose entries are removed on the server (as expiry would) are
/// reported lost by their next renewal, their release deletes nothing, and
/// the semaphore is free again.
#[tokio::test]
async fn permits_removed_on_the_server_are_reported_lost() {
    let server = start_redis().await;
    let backend = client(&server).await;
    let name = "shared/removed";
    let first = backend.try_permit(name, 2).await.expect("a permit");
    let second = backend.try_permit(name, 2).await.expect("the other permit");
    let holders = key("semaphore", name, "holders");
    assert_eq!(count(&server, &["ZCARD", &holders]).await, 2);
    assert_eq!(count(&server, &["DEL", &holders]).await, 1);
    within(TTL + SOON, "the first's lost signal", first.lost()).await;
    within(TTL + SOON, "the second's lost signal", second.lost()).await;
    fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "releasing a lost permit",
        first.release().await,
    );
    let fresh = backend.try_permit(name, 2).await.expect("a free permit");
    fresh.release().await.expect("release");
}

/// Redlock declares no semaphores or read-write locks, and refuses both
/// with `Unsupported` before any I/O, whatever its number of servers (one
/// server is a valid Redlock too).
#[tokio::test]
async fn redlock_has_no_shared_primitives() {
    for count in [1, 3] {
        let servers = support::start_redises(count).await;
        let backend = support::redlock_client(&servers).await;
        let caps = backend.capabilities();
        assert!(!caps.semaphore && !caps.rwlock, "{count} servers: {caps:?}");
        for access in [permit(2), Access::Read, Access::Write] {
            let err = backend
                .shared_with("shared/redlock", access, &waiting())
                .await;
            fails_with(ErrorKind::Unsupported, "a shared primitive on Redlock", err);
        }
    }
}

/// Scripts the server has run so far (`EVALSHA` calls).
async fn scripts_run(server: &RedisServer) -> u64 {
    server.command_calls("evalsha").await.expect("INFO")
}

/// The round trips the docs give: a free permit costs one script to take
/// and one to give back; a queued one costs one script to join the queue,
/// and the holder's release hands it over with no further call.
#[tokio::test]
async fn a_permit_costs_one_script_to_take_and_one_to_give_back() {
    let server = start_redis().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let name = "shared/round-trips";
    // A lease long enough that no renewal runs during the test.
    let long = |wait| {
        AcquireOptions::new()
            .ttl(Duration::from_secs(30))
            .wait(wait)
    };
    let before = scripts_run(&server).await;
    let held = a
        .shared_with(name, permit(1), &long(Wait::No))
        .await
        .expect("the free permit");
    assert_eq!(
        scripts_run(&server).await - before,
        1,
        "taking a free permit"
    );
    let queued_at = scripts_run(&server).await;
    let waiter = {
        let b: Arc<DynLockBackend> = Arc::new(b);
        tokio::spawn(async move {
            b.shared_with(
                name,
                permit(1),
                &long(Wait::Timeout(Duration::from_secs(30))),
            )
            .await
            .expect("the handed-over permit")
        })
    };
    queued(&server, "semaphore", name, 1).await;
    assert_eq!(
        scripts_run(&server).await - queued_at,
        1,
        "joining the queue"
    );
    let released_at = scripts_run(&server).await;
    held.release().await.expect("release");
    let next = joined(SOON, "the handed-over permit", waiter).await;
    assert_eq!(
        scripts_run(&server).await - released_at,
        1,
        "a release that hands the permit over, and the waiter's grant"
    );
    next.release().await.expect("release");
}
