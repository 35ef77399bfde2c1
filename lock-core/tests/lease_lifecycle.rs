//! distlock-core's lease lifecycle with a scripted backend and a clock the test
//! moves: what a suspend or a VM pause does to a held lock, and that a lock
//! reported lost never comes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{Grant, Lease};
use distlock_core::raw::{ManualClock, SentAt};
use distlock_core::{Error, ErrorKind, LockGuard, LockHealth, LockName, LostReason, Result};

const TTL: Duration = Duration::from_secs(30);

/// What the scripted server saw.
#[derive(Debug, Default)]
struct Seen {
    renewals: AtomicU32,
    released: AtomicBool,
}

/// A lease whose server always renews, and records its round trips.
#[derive(Debug)]
struct Scripted(Arc<Seen>);

#[async_trait]
impl Lease for Scripted {
    async fn renew(&self) -> Result<()> {
        self.0.renewals.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn release(&self) -> Result<()> {
        self.0.released.store(true, Ordering::SeqCst);
        Ok(())
    }
}

fn guard_on(clock: &Arc<ManualClock>, lease: &Arc<Seen>) -> LockGuard {
    let grant = Grant::new(
        LockName::new("lifecycle/clock").unwrap(),
        7,
        "scripted/7",
        TTL,
        SentAt::now_on(clock.clone()),
    );
    distlock_core::raw::leased_guard(grant, Scripted(lease.clone())).expect("a fresh grant")
}

/// The lease clock jumps past the TTL, as it does across a suspend, while
/// no timer has fired: the guard is not held from that instant on.
#[tokio::test]
async fn a_suspend_past_the_ttl_ends_is_held_at_once() {
    let clock = Arc::new(ManualClock::new());
    let lease = Arc::new(Seen::default());
    let guard = guard_on(&clock, &lease);
    assert!(guard.is_held());
    clock.advance(TTL);
    assert!(
        !guard.is_held(),
        "held after the lease clock passed the TTL"
    );
    assert_eq!(guard.remaining_validity(), Some(Duration::ZERO));
    let err = guard.renew().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(
        lease.renewals.load(Ordering::SeqCst),
        0,
        "renewed a lapsed lease"
    );
    assert_eq!(guard.lost().await, LostReason::DeadlineMissed);
}

/// Once `is_held` has said false, no later renewal, however successful,
/// makes it say true again.
#[tokio::test]
async fn a_lock_reported_lost_is_never_held_again() {
    let clock = Arc::new(ManualClock::new());
    let lease = Arc::new(Seen::default());
    let guard = guard_on(&clock, &lease);
    clock.advance(TTL);
    assert!(!guard.is_held());
    // Even a renewal that the server would accept must not revive it.
    assert!(guard.renew().await.is_err());
    assert!(!guard.is_held());
    guard
        .release()
        .await
        .expect("release is still owner-checked");
    assert!(lease.released.load(Ordering::SeqCst));
}

/// A grant whose lease had run out before it arrived never becomes a guard.
#[tokio::test]
async fn a_grant_older_than_its_ttl_is_refused_and_released() {
    let clock = Arc::new(ManualClock::new());
    let lease = Arc::new(Seen::default());
    let sent = SentAt::now_on(clock.clone());
    clock.advance(TTL);
    let grant = Grant::new(
        LockName::new("lifecycle/stale").unwrap(),
        8,
        "scripted/8",
        TTL,
        sent,
    );
    let err: Error = distlock_core::raw::leased_guard(grant, Scripted(lease.clone())).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(distlock_core::wait_for_background(Duration::from_secs(5)).await);
    assert!(
        lease.released.load(Ordering::SeqCst),
        "the stale grant was not released"
    );
}

/// A lease whose renewals fail for a while, then work again.
#[derive(Debug)]
struct Flaky(Arc<AtomicBool>);

#[async_trait]
impl Lease for Flaky {
    async fn renew(&self) -> Result<()> {
        match self.0.load(Ordering::SeqCst) {
            true => Err(Error::unavailable("server unreachable")),
            false => Ok(()),
        }
    }

    async fn release(&self) -> Result<()> {
        Ok(())
    }
}

/// Renewals that fail while validity is left make the guard say so (with
/// how long is left), and a renewal that works again makes it healthy.
#[tokio::test(start_paused = true)]
async fn a_guard_reports_failing_renewal_and_recovery() {
    let failing = Arc::new(AtomicBool::new(true));
    let grant = Grant::new(
        LockName::new("lifecycle/health").unwrap(),
        9,
        "scripted/9",
        TTL,
        SentAt::now_on(Arc::new(distlock_core::raw::TokioClock::new())),
    );
    let guard =
        distlock_core::raw::leased_guard(grant, Flaky(failing.clone())).expect("a fresh grant");
    assert_eq!(guard.health(), LockHealth::Held);
    let health = guard.health_changed(&LockHealth::Held).await;
    match &health {
        LockHealth::RenewalFailing { remaining, error } => {
            let left = remaining.expect("a local deadline");
            assert!(left > Duration::ZERO && left < TTL, "{left:?}");
            assert!(error.contains("server unreachable"), "{error}");
        }
        other => panic!("expected a failing renewal, got {other:?}"),
    }
    assert!(guard.is_held(), "still held while validity is left");
    failing.store(false, Ordering::SeqCst);
    assert_eq!(guard.health_changed(&health).await, LockHealth::Held);
    guard.release().await.expect("release");
}

/// Renewals that keep failing end in the loss, which the health reports.
#[tokio::test(start_paused = true)]
async fn failing_renewal_that_never_recovers_ends_in_loss() {
    let grant = Grant::new(
        LockName::new("lifecycle/health-lost").unwrap(),
        10,
        "scripted/10",
        TTL,
        SentAt::now_on(Arc::new(distlock_core::raw::TokioClock::new())),
    );
    let guard = distlock_core::raw::leased_guard(grant, Flaky(Arc::new(AtomicBool::new(true))))
        .expect("a fresh grant");
    let failing = guard.health_changed(&LockHealth::Held).await;
    assert!(
        matches!(failing, LockHealth::RenewalFailing { .. }),
        "{failing:?}"
    );
    let lost = guard.health_changed(&failing).await;
    assert_eq!(lost, LockHealth::Lost(LostReason::DeadlineMissed));
    assert!(!guard.is_held());
}
