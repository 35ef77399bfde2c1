//! The non-fair mode (`fair=false`) on a real Redis: what it declares, that
//! a release wakes its waiters at once, and that fair and non-fair clients
//! of one lock exclude each other, with tokens rising across both.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::{AcquireOptions, LockBackend, LockBackendExt, LockGuard, LockName, Wait};
use distlock_redis::{RedisBackend, RedlockBackend};
use tokio::time::{Instant, sleep, timeout};

use support::{client, nonfair_client, redlock_config_for, start_redis, start_redises};

/// A lease long enough that no waiter's timer (TTL/3, or the holder's
/// lease) could end its wait within [`PROMPT`]: only a wake-up can.
const LONG_TTL: Duration = Duration::from_secs(30);
/// How soon a woken waiter must hold the lock.
const PROMPT: Duration = Duration::from_secs(3);

fn name(text: &str) -> LockName {
    LockName::new(text).expect("a valid name")
}

/// Acquires `lock` with [`LONG_TTL`], waiting as long as it takes.
async fn take(backend: &RedisBackend, lock: &str) -> LockGuard {
    let options = AcquireOptions::new().ttl(LONG_TTL).wait(Wait::Forever);
    backend
        .acquire(&name(lock), &options)
        .await
        .expect("acquire")
}

/// Waits until `n` clients wait for `lock`, as `inspect` shows them.
async fn until_waiting(backend: &RedisBackend, lock: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = backend.inspect(&name(lock)).await.expect("inspect");
        if status.waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{lock}: {} of {n} waiters registered after 10 s",
            status.waiting
        );
        sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn fifo_is_declared_per_mode() {
    let server = start_redis().await;
    assert!(client(&server).await.capabilities().fifo);
    assert!(!nonfair_client(&server).await.capabilities().fifo);
    let servers = start_redises(3).await;
    let redlock = RedlockBackend::connect(redlock_config_for(&servers))
        .await
        .expect("redlock connects; its waiters always race");
    assert!(!redlock.capabilities().fifo);
}

#[tokio::test]
async fn a_release_wakes_a_non_fair_waiter_at_once() {
    let server = start_redis().await;
    let (holder, waiter) = (client(&server).await, nonfair_client(&server).await);
    let held = take(&holder, "wake").await;
    let first = held.token();
    let task = tokio::spawn(async move { take(&waiter, "wake").await });
    until_waiting(&holder, "wake", 1).await;
    held.release().await.expect("release");
    let guard = timeout(PROMPT, task)
        .await
        .expect("the release woke the waiter")
        .expect("waiter task");
    assert!(guard.token() > first, "{} after {first}", guard.token());
    guard.release().await.expect("release");
}

/// A fair waiter queues; a non-fair one only registers. A release by
/// either kind of holder hands the lock to the fair queue's head, and wakes
/// a non-fair waiter only when nobody is queued.
#[tokio::test]
async fn fair_and_non_fair_clients_take_turns() {
    let server = start_redis().await;
    let (fair, racer) = (client(&server).await, nonfair_client(&server).await);
    let (fair_waiter, racer_waiter) = (client(&server).await, nonfair_client(&server).await);

    let held = take(&racer, "mixed").await;
    let t1 = held.token();
    let queued = tokio::spawn(async move { take(&fair_waiter, "mixed").await });
    until_waiting(&fair, "mixed", 1).await;
    let racing = tokio::spawn(async move { take(&racer_waiter, "mixed").await });
    until_waiting(&fair, "mixed", 2).await;

    // The non-fair holder's release hands over to the queued fair waiter.
    held.release().await.expect("release");
    let fair_guard = timeout(PROMPT, queued)
        .await
        .expect("the hand-over reached the fair waiter")
        .expect("fair waiter task");
    let t2 = fair_guard.token();
    assert!(t2 > t1, "{t2} after {t1}");
    assert!(!racing.is_finished(), "the non-fair waiter got a held lock");

    // With nobody queued, the fair holder's release wakes the non-fair waiter.
    fair_guard.release().await.expect("release");
    let racer_guard = timeout(PROMPT, racing)
        .await
        .expect("the release woke the non-fair waiter")
        .expect("non-fair waiter task");
    assert!(
        racer_guard.token() > t2,
        "{} after {t2}",
        racer_guard.token()
    );

    // Each mode's try_lock sees the other's hold.
    let err = fair.try_lock("mixed").await.unwrap_err();
    assert_eq!(err.kind(), distlock_core::ErrorKind::WouldBlock, "{err}");
    racer_guard.release().await.expect("release");
    let fair_guard = fair.try_lock("mixed").await.expect("free");
    let err = racer.try_lock("mixed").await.unwrap_err();
    assert_eq!(err.kind(), distlock_core::ErrorKind::WouldBlock, "{err}");
    fair_guard.release().await.expect("release");
}

/// Fair and non-fair clients hammer one lock: never two holders at once,
/// and every grant's token is above the one before it.
#[tokio::test]
async fn mixed_clients_exclude_each_other_and_tokens_rise() {
    const ROUNDS: usize = 40;
    let server = start_redis().await;
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let backend = if i % 2 == 0 {
            client(&server).await
        } else {
            nonfair_client(&server).await
        };
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = backend
                    .lock_timeout("hammer", Duration::from_secs(20))
                    .await
                    .expect("lock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(guard.token());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        timeout(Duration::from_secs(60), task)
            .await
            .expect("the clients finish")
            .expect("client task");
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 4 * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order: {tokens:?}"
    );
}
