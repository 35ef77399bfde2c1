//! A lock whose validity lapsed stays lost, on a real server: the
//! connection goes quiet long enough that the client can no longer vouch
//! for its session, then comes back before the server expires it. Neither
//! the returning connection nor a renewal makes `is_held()` true again.

mod support;

use std::time::Duration;

use distlock_core::{Candidacy, ElectionBackend, LockBackendExt, LockName};
use support::{proxied, start_zk};
use tokio::time::{Instant, sleep, timeout};

/// Long enough that a quiet spell can end trust without ending the session.
const SESSION: Duration = Duration::from_secs(4);

/// Waits until `held()` turns false, failing after `bound`.
async fn until_not_held(held: impl Fn() -> bool, bound: Duration) -> Duration {
    let start = Instant::now();
    while held() {
        assert!(
            start.elapsed() < bound,
            "still trusted after {bound:?} of silence"
        );
        sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lock_is_never_held_again_when_the_connection_returns() {
    let server = start_zk(1).await;
    let addrs = server.addrs();
    let client = proxied(&addrs[0], "/lapsed", SESSION).await;
    let guard = client.backend.try_lock("quiet").await.expect("lock");
    let leader = client
        .backend
        .campaign(&LockName::new("quiet-leader").unwrap(), Candidacy::new("a"))
        .await
        .expect("campaign");
    client.proxy.blackhole();
    let quiet = until_not_held(|| guard.is_held(), SESSION).await;
    until_not_held(|| leader.is_leader(), SESSION - quiet).await;
    // Back before the server could have expired the session.
    assert!(quiet < SESSION * 3 / 4, "trust ended late: {quiet:?}");
    client.proxy.restore();
    // The connection is live again; give the session a few of its own
    // confirmations, then try to revive the lock every way there is.
    sleep(SESSION / 4).await;
    assert!(guard.renew().await.is_err(), "renewed a lapsed lock");
    assert!(
        leader.proclaim("b").await.is_err(),
        "proclaimed on a lapsed leadership"
    );
    sleep(SESSION / 4).await;
    assert!(!guard.is_held(), "a lapsed lock was held again");
    assert!(!leader.is_leader(), "a lapsed leadership came back");
    assert!(
        timeout(Duration::from_secs(1), guard.lost()).await.is_ok(),
        "the lost signal never fired"
    );
    // The name is usable again: the lapsed node was cleaned up.
    let other = client
        .backend
        .lock_timeout("quiet", SESSION * 2)
        .await
        .expect("the name is free again");
    other.release().await.expect("release");
}
