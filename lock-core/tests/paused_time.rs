//! Lease behaviour of the in-memory backend on Tokio's paused clock: hours
//! of lease time run in milliseconds, deterministically. The renewal
//! schedule's own rules are tested in `renewer.rs`.

use std::time::Duration;

#[cfg(feature = "testing")]
use distlock_core::LostReason;
use distlock_core::memory::MemoryBackend;
use distlock_core::{AcquireOptions, ErrorKind, LockBackend, LockBackendExt, LockName, Wait};
use tokio::time::{Instant, advance};

const TTL: Duration = Duration::from_secs(10);

fn backend() -> MemoryBackend {
    MemoryBackend::new().with_default_ttl(TTL).unwrap()
}

#[tokio::test(start_paused = true)]
async fn abandoned_lock_frees_exactly_after_its_ttl() {
    let backend = backend();
    let held = backend.lock("paused/abandon").await.unwrap();
    held.abandon();
    advance(TTL - Duration::from_millis(1)).await;
    let err = backend.try_lock("paused/abandon").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    advance(Duration::from_millis(2)).await;
    backend
        .try_lock("paused/abandon")
        .await
        .expect("free after the TTL");
}

#[tokio::test(start_paused = true)]
async fn renewal_keeps_lock_for_an_hour() {
    let backend = backend();
    let held = backend.lock("paused/renew").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(held.is_held());
    let err = backend.try_lock("paused/renew").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
}

#[tokio::test(start_paused = true)]
async fn waiter_wakes_at_holder_expiry_without_polling() {
    let backend = backend();
    let held = backend.lock("paused/wake").await.unwrap();
    let token = held.token();
    held.abandon();
    let start = Instant::now();
    let next = backend.lock("paused/wake").await.unwrap();
    assert_eq!(start.elapsed(), TTL);
    assert!(next.token() > token);
}

#[cfg(feature = "testing")]
#[tokio::test(start_paused = true)]
async fn expire_now_fires_lost_signal_and_frees_lock() {
    let backend = backend();
    let held = backend.lock("paused/expire").await.unwrap();
    assert!(backend.expire_now(held.name()));
    assert_eq!(held.lost().await, LostReason::Expired);
    assert!(!held.is_held());
    let err = held.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    backend.try_lock("paused/expire").await.expect("free");
}

#[tokio::test(start_paused = true)]
async fn timed_wait_gives_up_at_its_deadline() {
    let backend = backend();
    let _held = backend.lock("paused/timeout").await.unwrap();
    let name = LockName::new("paused/timeout").unwrap();
    let options = AcquireOptions::new().wait(Wait::Timeout(Duration::from_secs(3)));
    let start = Instant::now();
    let err = backend.acquire(&name, &options).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}
