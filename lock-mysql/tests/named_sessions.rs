//! The named layout's lease is its session: a guard whose session dies is
//! reported lost within TTL/3 plus a request timeout, and a cancelled
//! wait never leaves a late grant behind.

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, LockBackend, LockBackendExt, LockName, LostReason, Wait};
use support::{TTL, kill_holder, named_client, start_mariadb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_is_reported_lost_and_the_lock_is_free() {
    let server = start_mariadb().await;
    let (a, b) = (named_client(&server).await, named_client(&server).await);
    let guard = a.lock("named/killed").await.expect("lock");
    let lost = guard.lost_signal();
    kill_holder(&server, &guard).await;
    // Checked every TTL/3; the bound is that plus a request timeout.
    tokio::time::timeout(TTL / 3 + Duration::from_secs(3), lost.lost())
        .await
        .expect("lost within the bound");
    assert_eq!(lost.reason(), Some(LostReason::Revoked));
    assert!(!guard.is_held());
    // The server freed it with the session.
    let next = b.try_lock("named/killed").await.expect("free");
    assert!(next.token() > guard.token());
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_no_lock_behind() {
    let server = start_mariadb().await;
    let (a, b) = (named_client(&server).await, named_client(&server).await);
    let name = LockName::new("named/cancel").unwrap();
    let held = a.lock("named/cancel").await.expect("lock");
    let waiting = {
        let b = b.clone();
        let name = name.clone();
        tokio::spawn(async move { b.acquire(&name, &AcquireOptions::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting.abort();
    let _ = waiting.await;
    held.release().await.expect("release");
    // The cancelled waiter's session was killed: it never takes the lock.
    let options = AcquireOptions::new().wait(Wait::Timeout(Duration::from_secs(5)));
    let guard = a.acquire(&name, &options).await.expect("free again");
    guard.release().await.expect("release");
}
