//! A release wakes the next waiter through `NOTIFY` at once, not when its
//! bounded re-check comes round (TTL/3: ten seconds here), also when the
//! backend was connected on a runtime that has shut down since.

mod support;

use std::time::{Duration, Instant};

use distlock_core::{LockBackend, LockBackendExt, LockName};
use distlock_postgres::PostgresBackend;
use support::{config_for, start_postgres};

const LONG_TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_next_waiter_at_once() {
    let server = start_postgres().await;
    let connect = || PostgresBackend::connect(config_for(&server).with_ttl(LONG_TTL));
    let (holder, waiter, observer) = (
        connect().await.unwrap(),
        connect().await.unwrap(),
        connect().await.unwrap(),
    );
    assert_release_wakes_the_waiter(
        holder,
        waiter,
        observer,
        "wakeups/handoff",
        "the notification did not wake the waiter",
    )
    .await;
}

/// Queues `waiter` behind `holder` on `name`, releases, and checks that the
/// waiter gets in within two seconds, long before the TTL/3 re-check;
/// `why` says what a slow hand-over means.
async fn assert_release_wakes_the_waiter(
    holder: PostgresBackend,
    waiter: PostgresBackend,
    observer: PostgresBackend,
    name: &'static str,
    why: &str,
) {
    let guard = holder.lock(name).await.expect("lock");
    let queued = tokio::spawn(async move { waiter.lock(name).await });
    let lock_name = LockName::new(name).unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while observer.inspect(&lock_name).await.expect("inspect").waiting != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiter queues");
    let released = Instant::now();
    guard.release().await.expect("release");
    let next = tokio::time::timeout(LONG_TTL / 3, queued)
        .await
        .expect("the waiter gets in")
        .expect("task")
        .expect("lock");
    let handoff = released.elapsed();
    assert!(
        handoff < Duration::from_secs(2),
        "hand-over took {handoff:?}: {why}"
    );
    next.release().await.expect("release");
}

/// A backend connected on a runtime that has since shut down still wakes
/// its waiters at once: the listening task ended with that runtime, and
/// the next wait starts it again on the waiter's runtime.
#[test]
fn a_backend_from_a_runtime_that_shut_down_still_wakes_its_waiters() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let current = runtime();
    let server = current.block_on(start_postgres());
    let config = config_for(&server).with_ttl(LONG_TTL);
    let first = runtime();
    let waiter = first
        .block_on(PostgresBackend::connect(config.clone()))
        .expect("connect");
    // Wait until the first runtime's listener listens, so that its end
    // below is the end of a working listener.
    first.block_on(async {
        let warm = waiter.lock("wakeups/warm").await.expect("lock");
        warm.release().await.expect("release");
    });
    first.shutdown_timeout(Duration::from_secs(5));

    current.block_on(async {
        let (holder, observer) = (
            PostgresBackend::connect(config.clone()).await.unwrap(),
            PostgresBackend::connect(config.clone()).await.unwrap(),
        );
        assert_release_wakes_the_waiter(
            holder,
            waiter,
            observer,
            "wakeups/runtime",
            "the waiter's backend no longer listens",
        )
        .await;
    });
}
