//! The multi-lock on the in-memory backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::memory::MemoryBackend;
use crate::{ErrorKind, LockBackend, LockBackendExt, LockName, LostReason, wait_for_background};

const BOUND: Duration = Duration::from_secs(5);

fn server() -> MemoryBackend {
    MemoryBackend::new()
        .with_default_ttl(Duration::from_millis(500))
        .unwrap()
}

#[tokio::test]
async fn bad_sets_are_rejected_before_any_lock_is_taken() {
    let backend = server();
    let err = backend.try_lock_all(&[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("empty"), "{err}");
    let err = backend
        .try_lock_all(&["m/a", "m/b", "m/a"])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("\"m/a\" appears twice"), "{err}");
    let err = backend
        .try_lock_all(&["m/a", "bad\nname"])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    let zero = crate::AcquireOptions::new().ttl(Duration::ZERO);
    let err = backend.lock_all_with(&["m/a"], &zero).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    backend.try_lock("m/a").await.expect("nothing was taken");
}

#[tokio::test]
async fn members_are_taken_sorted_and_expose_their_tokens() {
    let backend = server();
    let group = backend.lock_all(&["m/c", "m/a", "m/b"]).await.unwrap();
    let names: Vec<&str> = group.names().map(LockName::as_str).collect();
    assert_eq!(names, ["m/a", "m/b", "m/c"]);
    for (name, token) in group.tokens() {
        assert_eq!(group.token_of(name.as_str()), Some(token));
    }
    assert_eq!(group.token_of("m/z"), None);
    assert!(group.is_held());
    let signal = group.lost_signal();
    group.release().await.unwrap();
    assert_eq!(signal.lost().await, LostReason::Released);
    backend
        .try_lock_all(&["m/a", "m/b", "m/c"])
        .await
        .expect("all released");
}

#[tokio::test]
async fn a_busy_member_fails_the_set_naming_it_and_frees_the_others() {
    let backend = server();
    let other = backend.try_lock("m/b").await.unwrap();
    let err = backend
        .try_lock_all(&["m/a", "m/b", "m/c"])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert!(
        err.message().contains("lock m/b of the multi-lock"),
        "{err}"
    );
    backend
        .try_lock("m/a")
        .await
        .expect("a was released before the error");
    other.release().await.unwrap();
}

#[tokio::test]
async fn the_wait_bounds_the_whole_acquisition() {
    let backend = server();
    let wait = Duration::from_millis(300);
    let _b = backend.try_lock("m/b").await.unwrap();
    let _c = backend.try_lock("m/c").await.unwrap();
    let start = Instant::now();
    let err = backend
        .lock_all_timeout(&["m/a", "m/b", "m/c"], wait)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.message().contains("lock m/b"), "{err}");
    let elapsed = start.elapsed();
    assert!(elapsed >= wait && elapsed < wait * 2, "{elapsed:?}");
}

#[tokio::test]
async fn opposite_orders_do_not_deadlock() {
    let backend = server();
    let counter = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = [["m/a", "m/b"], ["m/b", "m/a"]]
        .into_iter()
        .map(|names| {
            let (backend, counter) = (backend.clone(), counter.clone());
            tokio::spawn(async move {
                for _ in 0..50 {
                    let group = backend.lock_all(&names).await.unwrap();
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    group.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(BOUND, task)
            .await
            .expect("deadlock")
            .unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 100);
}

#[tokio::test]
async fn a_lost_member_fires_the_group_signal_with_its_reason() {
    let backend = server();
    let group = backend.lock_all(&["m/a", "m/b"]).await.unwrap();
    let b = LockName::new("m/b").unwrap();
    backend
        .force_release(&b)
        .await
        .unwrap()
        .expect("b was held");
    let reason = tokio::time::timeout(BOUND, group.lost()).await.unwrap();
    assert_eq!(reason, LostReason::Revoked);
    assert_eq!(group.lost_member(), Some(&b));
    assert!(!group.is_held());
    let err = group.release().await.unwrap_err();
    assert!(err.message().contains("m/b"), "{err}");
    backend
        .try_lock("m/a")
        .await
        .expect("a released with the group");
}

#[tokio::test]
async fn dropping_the_guard_or_the_acquisition_releases_the_members() {
    let backend = server();
    drop(backend.lock_all(&["m/a", "m/b"]).await.unwrap());
    assert!(wait_for_background(BOUND).await);
    let again = backend.try_lock_all(&["m/a", "m/b"]).await;
    again
        .expect("dropped guard released")
        .release()
        .await
        .unwrap();

    let busy = backend.try_lock("m/b").await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        backend.lock_all(&["m/a", "m/b"]),
    )
    .await;
    assert!(cancelled.is_err(), "must still wait for b");
    assert!(wait_for_background(BOUND).await);
    backend
        .try_lock("m/a")
        .await
        .expect("cancelled acquisition released a");
    busy.release().await.unwrap();
}
