//! Properties of acquiring and waiting: exclusion, try_lock, timeouts,
//! cancellation, independence of names, FIFO, input validation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{AcquireOptions, ErrorKind, LockBackendExt, LockName, Wait};
use tokio::time::Instant;

use super::{SLACK, Target, within};
use crate::assert::joined;

/// Tasks per contention test, each with its own client.
const CONTENDERS: usize = 8;
/// Critical sections per task.
const ROUNDS: usize = 10;

/// 8 clients do a non-atomic read-modify-write of a shared counter under the
/// lock; the count is exact, no two are ever inside at once, and the tokens
/// seen inside strictly increase.
pub async fn mutual_exclusion_under_contention(target: &dyn Target) {
    let name = "conformance/mutex";
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let client = target.client().await;
        let (counter, inside, tokens) = (counter.clone(), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = client
                    .lock_timeout(name, Duration::from_secs(60))
                    .await
                    .expect("lock");
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two holders inside at once"
                );
                tokens.lock().unwrap().push(guard.token());
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    super::join_within(Duration::from_secs(120), "contention run", tasks).await;
    assert_eq!(counter.load(Ordering::SeqCst), (CONTENDERS * ROUNDS) as u64);
    let tokens = tokens.lock().unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
}

/// `try_lock` on a lock held by another client fails at once with `WouldBlock`.
pub async fn try_lock_on_held_lock_would_block(target: &dyn Target) {
    let (a, b) = super::two_clients(target).await;
    let held = a.try_lock("conformance/try").await.expect("first try_lock");
    let err = within(SLACK, "try_lock", b.try_lock("conformance/try"))
        .await
        .expect_err("second try_lock must fail");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert!(err.is_retryable());
    held.release().await.expect("release");
    let again = b
        .try_lock("conformance/try")
        .await
        .expect("free after release");
    again.release().await.expect("release");
}

/// A bounded wait on a held lock fails with `Timeout` no earlier than the
/// wait and not much later.
pub async fn wait_timeout_returns_timeout_within_bound(target: &dyn Target) {
    let (_a, held, b) = super::one_holds(target, "conformance/timeout").await;
    let wait = Duration::from_millis(500);
    let start = Instant::now();
    let err = within(
        wait + SLACK,
        "timed wait",
        b.lock_timeout("conformance/timeout", wait),
    )
    .await
    .expect_err("must time out");
    let elapsed = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        elapsed >= wait,
        "gave up after {elapsed:?}, before the {wait:?} wait"
    );
    assert!(held.is_held());
    held.release().await.expect("release");
}

/// A held lock refuses `try_lock` with `WouldBlock` and a bounded wait with
/// `Timeout`; once the holder releases, the same client's `try_lock` succeeds
/// at once: neither failed attempt left anything (a queue entry, a stale
/// claim) behind.
pub async fn failed_attempts_leave_nothing_behind(target: &dyn Target) {
    let name = "conformance/refused";
    let (_a, held, b) = super::one_holds(target, name).await;
    let err = within(SLACK, "try_lock", b.try_lock(name))
        .await
        .expect_err("held");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let wait = Duration::from_millis(300);
    let err = within(wait + SLACK, "timed wait", b.lock_timeout(name, wait))
        .await
        .expect_err("held");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    held.release().await.expect("release");
    let next = within(SLACK, "try_lock after release", b.try_lock(name))
        .await
        .expect("free at once after release: the failed attempts left nothing behind");
    next.release().await.expect("release");
}

/// Locks with different names are independent.
pub async fn different_names_do_not_block(target: &dyn Target) {
    let (a, b) = super::two_clients(target).await;
    let x = a.try_lock("conformance/names/x").await.expect("x");
    let y = b
        .try_lock("conformance/names/y")
        .await
        .expect("y is a different lock");
    let prefix = b
        .try_lock("conformance/names")
        .await
        .expect("a prefix is a different lock");
    for guard in [x, y, prefix] {
        guard.release().await.expect("release");
    }
}

/// Empty, control-character and over-long names give `InvalidName`, and a
/// zero TTL gives `InvalidConfig`, at once.
pub async fn invalid_input_is_rejected_before_io(target: &dyn Target) {
    let client = target.client().await;
    let long = "n".repeat(distlock_core::MAX_NAME_LEN + 1);
    for bad in ["", "nul\0inside", "line\nbreak", long.as_str()] {
        let err = within(SLACK, "invalid name", client.try_lock(bad))
            .await
            .expect_err("invalid name must fail");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
    }
    let name = LockName::new("conformance/zero-ttl").unwrap();
    let zero = AcquireOptions::new().ttl(Duration::ZERO).wait(Wait::No);
    let err = within(SLACK, "zero ttl", client.acquire(&name, &zero))
        .await
        .expect_err("zero TTL must fail");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// A waiter whose `lock()` future is dropped does not keep the next contender
/// waiting longer than its TTL after the holder releases.
pub async fn cancelled_lock_does_not_block_next_contender(target: &dyn Target) {
    let name = "conformance/cancel";
    let (a, b, c) = (
        target.client().await,
        target.client().await,
        target.client().await,
    );
    let held = a.lock(name).await.expect("lock");
    let cancelled = tokio::time::timeout(Duration::from_millis(300), b.lock(name)).await;
    assert!(cancelled.is_err(), "b must still be waiting when cancelled");
    held.release().await.expect("release");
    let next = within(
        target.ttl() + SLACK,
        "next contender after a cancelled waiter",
        c.lock(name),
    )
    .await
    .expect("c acquires");
    next.release().await.expect("release");
}

/// Where the backend declares FIFO, waiters acquire in the order they queued.
pub async fn fifo_order_where_declared(target: &dyn Target) {
    let caps = super::capabilities_of(target).await;
    if !caps.fifo {
        eprintln!(
            "fifo_order_where_declared: {} declares no FIFO; nothing to check",
            caps.backend
        );
        return;
    }
    let name = "conformance/fifo";
    let holder = target.client().await;
    let held = holder.lock(name).await.expect("lock");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let client = target.client().await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client
                .lock_timeout(name, Duration::from_secs(30))
                .await
                .expect("lock");
            order.lock().unwrap().push(i);
            guard.release().await.expect("release");
        }));
        // Queue position is set when the waiter's request reaches the server;
        // give each one time to get there before the next starts.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    held.release().await.expect("release");
    for waiter in waiters {
        joined(Duration::from_secs(60), "fifo waiters", waiter).await;
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}
