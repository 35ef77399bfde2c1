//! Properties of a holder whose lock was taken from it and given to another
//! client: by expiry, and by an operator's `force_release`. The old guard
//! must never extend the new holder's lock, nor claim the lock again.

use distlock_core::{AcquireOptions, DynLockBackend, ErrorKind, LockBackendExt, LockGuard, Wait};

use super::{SLACK, Target, within};
use crate::assert::{evicts, fails_with_one_of};

/// A holder whose lease ended (as on expiry) and whose lock another client
/// took at once never renews the new holder's lock and never reports held
/// again: its lost signal fires within a TTL, an explicit renewal fails, and
/// the new holder, once it stops renewing, still expires after its own TTL.
pub async fn an_expired_holder_never_renews_its_successors_lock(target: &dyn Target) {
    let (a, b, c) = (
        target.client().await,
        target.client().await,
        target.client().await,
    );
    let name = "conformance/takeover/expired";
    let stale = a.lock(name).await.expect("lock");
    target.kill_lease(&stale).await;
    // At once, so that the old guard's next renewal meets the new holder.
    let fresh = within(
        target.ttl() * 3 + SLACK,
        "take over after the lease ended",
        b.lock(name),
    )
    .await
    .expect("lock after the lease ended");
    stays_out(target, stale, fresh, &*c, target.ttl() + SLACK).await;
}

/// A holder whose lock an operator broke with `force_release`, and which
/// another client took at once, never renews the new holder's lock and
/// never reports held again, as [`an_expired_holder_never_renews_its_successors_lock`].
/// Backends without `force_release` skip this case, saying so.
pub async fn a_broken_holder_never_renews_its_successors_lock(target: &dyn Target) {
    let (a, b, c) = (
        target.client().await,
        target.client().await,
        target.client().await,
    );
    if !b.capabilities().admin.force_release {
        eprintln!(
            "{} has no force_release; only the expiry variant applies",
            b.capabilities().backend
        );
        return;
    }
    let name = "conformance/takeover/broken";
    let lock = distlock_core::LockName::new(name).expect("valid name");
    let stale = a.lock(name).await.expect("lock");
    evicts(&*b, &lock).await;
    let fresh = b
        .acquire(&lock, &AcquireOptions::new().wait(Wait::Timeout(SLACK)))
        .await
        .expect("the broken lock is free");
    // Detection of a break is bounded like the existing force_release case.
    stays_out(target, stale, fresh, &*c, target.ttl() * 2 + SLACK).await;
}

/// Checks that `stale`, whose lock `fresh` now holds, stays out of it: its
/// lost signal fires within `lost_bound` with `is_held` false, a renewal
/// fails and leaves `fresh` held, and `fresh`, crashed, expires for `other`
/// within three TTLs, as if `stale` did not exist.
async fn stays_out(
    target: &dyn Target,
    stale: LockGuard,
    fresh: LockGuard,
    other: &DynLockBackend,
    lost_bound: std::time::Duration,
) {
    within(
        lost_bound,
        "the taken-over guard's lost signal (its renewals must fail once another client holds the lock)",
        stale.lost(),
    )
    .await;
    assert!(
        !stale.is_held(),
        "the taken-over guard claims the lock again"
    );
    fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "renewing the taken-over guard",
        within(SLACK, "renew the taken-over guard", stale.renew()).await,
    );
    assert!(
        fresh.is_held(),
        "the new holder lost its lock: {:?}",
        fresh.lost_signal().reason()
    );
    // The new holder stops renewing; only its own TTL may keep the lock.
    let next = super::take_over_after_crash(target, fresh, other).await;
    assert!(
        !stale.is_held(),
        "the taken-over guard claims the lock again"
    );
    fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "releasing the taken-over guard",
        within(SLACK, "release the taken-over guard", stale.release()).await,
    );
    assert!(next.is_held(), "a stale release must not touch the holder");
    next.release().await.expect("release");
}
