//! Properties of leases: expiry, renewal, the lost signal, and safe release.

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use tokio::time::Instant;

use super::{SLACK, Target, within};

/// After the holder stops renewing, another client acquires once the TTL has
/// run out (and not never).
pub async fn expired_holder_is_taken_over_after_ttl(target: &dyn Target) {
    let (a, b) = super::two_clients(target).await;
    let held = a.lock("conformance/expiry").await.expect("lock");
    let err = b.try_lock("conformance/expiry").await.expect_err("held");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let next = super::take_over_after_crash(target, held, &*b).await;
    assert!(next.is_held());
    next.release().await.expect("release");
}

/// Background renewal keeps a lock held across five TTLs: no one else gets
/// it, and the holder never sees it lost.
pub async fn renewal_keeps_lock_across_five_ttls(target: &dyn Target) {
    let (a, b) = super::two_clients(target).await;
    let ttl = target.ttl();
    let held = a.lock("conformance/renewal").await.expect("lock");
    let until = Instant::now() + ttl * 5;
    while Instant::now() < until {
        let err = b
            .try_lock("conformance/renewal")
            .await
            .expect_err("must stay held while renewed");
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
        assert!(
            held.is_held(),
            "holder lost its renewed lock: {:?}",
            held.lost_signal().reason()
        );
        tokio::time::sleep(ttl / 4).await;
    }
    held.renew().await.expect("explicit renew");
    held.release().await.expect("release");
}

/// Killing the lease from outside fires the holder's lost signal promptly,
/// and `is_held` turns false.
pub async fn lost_signal_fires_when_lease_is_killed(target: &dyn Target) {
    let client = target.client().await;
    let held = client.lock("conformance/lost").await.expect("lock");
    let signal = held.lost_signal();
    assert!(!signal.is_lost());
    target.kill_lease(&held).await;
    let bound = target.ttl() + SLACK;
    let reason = within(bound, "lost signal after the lease was killed", held.lost()).await;
    assert!(
        !held.is_held(),
        "guard still claims the lock after loss ({reason})"
    );
    assert!(signal.is_lost());
    crate::assert::fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "releasing a lost lock reports it",
        held.release().await,
    );
}

/// A stale guard's release never deletes the lock of the holder after it.
pub async fn stale_release_never_deletes_new_holder(target: &dyn Target) {
    let (a, b, c) = (
        target.client().await,
        target.client().await,
        target.client().await,
    );
    let name = "conformance/stale";
    let stale = a.lock(name).await.expect("lock");
    target.kill_lease(&stale).await;
    let fresh = within(target.ttl() * 3 + SLACK, "acquire after kill", b.lock(name))
        .await
        .expect("lock");
    crate::assert::fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "stale release must report",
        stale.release().await,
    );
    let err = c
        .try_lock(name)
        .await
        .expect_err("new holder must still hold");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert!(fresh.is_held());
    fresh.release().await.expect("release");
}

/// Releasing a lock that is already gone (lost, or released on the server)
/// reports `NotHeld` or `LeaseLost`, does not panic or hang, and leaves the
/// lock usable.
pub async fn release_after_loss_is_harmless(target: &dyn Target) {
    let (a, b) = super::two_clients(target).await;
    let name = "conformance/double-release";
    let first = a.lock(name).await.expect("lock");
    first.release().await.expect("first release");
    let gone = a.lock(name).await.expect("lock again");
    target.kill_lease(&gone).await;
    within(target.ttl() + SLACK, "lost signal", gone.lost()).await;
    crate::assert::fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "releasing twice reports it",
        within(SLACK, "second release", gone.release()).await,
    );
    let next = within(
        target.ttl() * 3 + SLACK,
        "lock still usable",
        b.lock_timeout(name, Duration::from_secs(30)),
    )
    .await
    .expect("lock after double release");
    next.release().await.expect("release");
}
