//! Leases on the server's clock: a holder cut off from the server stops
//! calling itself the holder within its TTL, and the next client gets in
//! once the server's clock says the lease ran out.

mod support;

use std::time::{Duration, Instant};

use distlock_core::LockBackendExt;
use support::{TTL, client, expire, start_postgres};

const SLACK: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_renew_loses_the_lock_within_its_ttl() {
    let server = start_postgres().await;
    let holder = client(&server).await;
    let guard = holder.lock("lease/paused").await.expect("lock");
    let token = guard.token();
    server.pause();
    let paused_at = Instant::now();
    let reason = tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("the lost signal fires");
    assert!(
        paused_at.elapsed() <= TTL + Duration::from_millis(500),
        "lost after {:?} ({reason})",
        paused_at.elapsed()
    );
    assert!(!guard.is_held());
    server.resume();
    let next = client(&server).await;
    let taken = tokio::time::timeout(TTL * 3 + SLACK, next.lock("lease/paused"))
        .await
        .expect("taken over in time")
        .expect("lock");
    assert!(taken.token() > token);
    taken.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_never_renewed() {
    let server = start_postgres().await;
    let backend = client(&server).await;
    let guard = backend.lock("lease/expired").await.expect("lock");
    expire(&server, &guard).await;
    let err = guard.renew().await.unwrap_err();
    assert_eq!(err.kind(), distlock_core::ErrorKind::LeaseLost, "{err}");
    tokio::time::timeout(SLACK, guard.lost())
        .await
        .expect("the lost signal fires");
    // Nobody else was let in twice: the next grant is fresh.
    let next = backend.try_lock("lease/expired").await.expect("free again");
    assert!(next.token() > guard.token());
    next.release().await.expect("release");
}
