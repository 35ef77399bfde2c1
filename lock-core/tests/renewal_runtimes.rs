//! Renewal across several Tokio runtimes, as programs have them (tests,
//! `block_on` helpers, a library with a private runtime): a lease is
//! renewed on the runtime that took it, a runtime that is idle or gone never
//! holds up another's leases, and nothing renews a lock nobody holds.

use std::sync::mpsc;
use std::time::Duration;

use distlock_core::memory::MemoryBackend;
use distlock_core::raw::{LossNotifier, Renewer, SentAt, Validity};
use distlock_core::{ErrorKind, LockBackendExt, LockGuard, LostReason};
use futures::FutureExt;
use tokio::runtime::{Builder, Runtime};
use tokio::time::timeout;

const TTL: Duration = Duration::from_millis(300);

fn backend() -> MemoryBackend {
    MemoryBackend::new()
        .with_default_ttl(TTL)
        .expect("a valid TTL")
}

fn current_thread() -> Runtime {
    Builder::new_current_thread().enable_all().build().unwrap()
}

fn multi_thread() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `guard` stays held for four TTLs, renewed all along: its lost signal
/// never fires, it still says held, and another client cannot take it.
async fn stays_held(backend: &MemoryBackend, guard: &LockGuard) {
    let watched = timeout(TTL * 4, guard.lost()).await;
    assert!(
        watched.is_err(),
        "lost a healthy lock: {:?}",
        watched.unwrap()
    );
    assert!(guard.is_held(), "not held after four TTLs: not renewed");
    let other = backend.try_lock(guard.name().as_str()).await.unwrap_err();
    assert_eq!(other.kind(), ErrorKind::WouldBlock, "{other}");
}

#[test]
fn a_runtime_dropped_right_after_its_lock_leaves_later_locks_renewed() {
    let backend = backend();
    let first = current_thread();
    let orphan = first.block_on(backend.lock("runtimes/a")).expect("lock a");
    drop(first);
    // Nothing can renew that lease any more, and its guard says so at once.
    assert!(
        matches!(
            orphan.lost_signal().reason(),
            Some(LostReason::RenewalFailed(_))
        ),
        "{:?}",
        orphan.lost_signal().reason()
    );
    assert!(!orphan.is_held());
    let second = multi_thread();
    second.block_on(async {
        let guard = backend.lock("runtimes/b").await.expect("lock b");
        stays_held(&backend, &guard).await;
    });
}

#[test]
fn a_runtime_shut_down_mid_renewal_loses_that_lease_rather_than_forgetting_it() {
    let renewer = Renewer::new();
    let notifier = LossNotifier::new();
    let (started, renewing) = mpsc::channel();
    let runtime = multi_thread();
    let _task = runtime.block_on(async {
        let validity = Validity::from_sent(&SentAt::now(), TTL);
        renewer.schedule(
            "test",
            TTL,
            validity,
            notifier.clone(),
            Box::new(move || {
                let _ = started.send(());
                futures::future::pending().boxed()
            }),
        )
    });
    renewing
        .recv_timeout(TTL * 10)
        .expect("a renewal attempt started");
    drop(runtime);
    assert!(
        matches!(
            notifier.signal().reason(),
            Some(LostReason::RenewalFailed(_))
        ),
        "{:?}",
        notifier.signal().reason()
    );
}

#[test]
fn an_idle_runtime_does_not_hold_up_the_leases_of_a_busy_one() {
    let backend = backend();
    let idle = current_thread();
    // Taken on a runtime that is then kept but never driven again.
    let parked = idle.block_on(backend.lock("runtimes/idle")).expect("lock");
    let busy = multi_thread();
    busy.block_on(async {
        let guard = backend.lock("runtimes/busy").await.expect("lock");
        stays_held(&backend, &guard).await;
    });
    drop(parked);
}

#[test]
fn a_guard_dropped_inside_an_idle_runtime_stops_renewing_its_lock() {
    let backend = backend();
    let busy = multi_thread();
    let guard = busy
        .block_on(backend.lock("runtimes/dropped"))
        .expect("lock");
    let token = guard.token();
    let idle = current_thread();
    {
        // The guard's release becomes a task of `idle`, which nobody drives.
        let _entered = idle.enter();
        drop(guard);
    }
    busy.block_on(async {
        // Not renewed any more: its lease runs out and the lock is free.
        let next = timeout(TTL * 4, backend.lock("runtimes/dropped"))
            .await
            .expect("the lock frees itself within about a TTL")
            .expect("lock");
        assert!(next.token() > token);
    });
}
