//! One renewal schedule for many leases, on Tokio's paused clock: each
//! lease keeps its own rhythm, one lease's trouble never delays another's,
//! and all of it runs on one task that exists only while there is work.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use distlock_core::raw::{
    LossNotifier, RenewFn, RenewalTask, Renewer, SentAt, TokioClock, Validity,
};
use distlock_core::{Error, LostReason};
use futures::FutureExt;
use tokio::time::{Instant, advance, sleep, sleep_until};

const TTL: Duration = Duration::from_secs(30);

fn validity(ttl: Duration) -> Validity {
    Validity::from_sent(&SentAt::now_on(Arc::new(TokioClock::new())), ttl)
}

/// A renewal that always succeeds and counts its calls.
fn counting() -> (Arc<AtomicU32>, RenewFn) {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let renew: RenewFn = Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }.boxed()
    });
    (calls, renew)
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn many_leases_are_each_renewed_every_third_of_their_ttl_by_one_task() {
    let renewer = Renewer::new();
    let mut leases = Vec::new();
    for _ in 0..100 {
        let (calls, renew) = counting();
        let task = renewer.schedule("test", TTL, validity(TTL), LossNotifier::new(), renew);
        leases.push((calls, task));
        // Spread the leases over the first period.
        advance(TTL / 300).await;
    }
    assert_eq!(alive_tasks(), 1, "one driver for every lease");
    sleep(Duration::from_secs(3600)).await;
    for (calls, _) in &leases {
        // 3,600 s at one renewal per 10 s, give or take the first period.
        let calls = calls.load(Ordering::SeqCst);
        assert!((359..=361).contains(&calls), "{calls} renewals in an hour");
    }
    drop(leases);
    tokio::task::yield_now().await;
    assert_eq!(alive_tasks(), 0, "the driver exits when nothing is left");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_task_is_never_renewed_again_while_others_are() {
    let renewer = Renewer::new();
    let (stopped_calls, renew) = counting();
    let stopped = renewer.schedule("test", TTL, validity(TTL), LossNotifier::new(), renew);
    let (kept_calls, renew) = counting();
    let _kept = renewer.schedule("test", TTL, validity(TTL), LossNotifier::new(), renew);
    sleep(TTL / 3 + Duration::from_millis(1)).await;
    assert_eq!(stopped_calls.load(Ordering::SeqCst), 1);
    drop(stopped);
    sleep(TTL * 10).await;
    assert_eq!(stopped_calls.load(Ordering::SeqCst), 1);
    assert_eq!(kept_calls.load(Ordering::SeqCst), 31);
}

/// A lease whose renewal is `troubled`, scheduled beside a healthy one:
/// returns the troubled lease's notifier, the healthy lease's renewal count
/// and notifier, and both tasks (dropping them stops renewal).
fn troubled_beside_healthy(
    renewer: &Renewer,
    troubled: RenewFn,
) -> (LossNotifier, Arc<AtomicU32>, LossNotifier, [RenewalTask; 2]) {
    let lost = LossNotifier::new();
    let troubled = renewer.schedule("test", TTL, validity(TTL), lost.clone(), troubled);
    let (calls, renew) = counting();
    let healthy = LossNotifier::new();
    let kept = renewer.schedule("test", TTL, validity(TTL), healthy.clone(), renew);
    (lost, calls, healthy, [troubled, kept])
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_hangs_delays_no_other_lease() {
    let start = Instant::now();
    let (hung, calls, healthy, _tasks) =
        troubled_beside_healthy(&Renewer::new(), Box::new(|| std::future::pending().boxed()));
    let reason = hung.signal().lost().await;
    assert_eq!(reason, LostReason::DeadlineMissed);
    assert!(start.elapsed() < TTL, "lost after {:?}", start.elapsed());
    sleep(TTL * 3).await;
    // Every TTL/3 from its phase (its first renewal came within TTL/3).
    let periods = (start.elapsed().as_secs_f64() / (TTL / 3).as_secs_f64()) as u32;
    let calls = calls.load(Ordering::SeqCst);
    assert!(
        (periods..=periods + 1).contains(&calls),
        "renewed on time throughout: {calls} renewals in {periods} periods"
    );
    assert!(!healthy.is_fired());
}

#[tokio::test(start_paused = true)]
async fn a_panicking_renewal_loses_its_own_lease_only() {
    let start = Instant::now();
    let (broken, calls, healthy, _tasks) = troubled_beside_healthy(
        &Renewer::new(),
        Box::new(|| async { panic!("a bug in a backend's renewal") }.boxed()),
    );
    let reason = broken.signal().lost().await;
    assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
    // Renewed three times: TTL/6 to TTL/3 after the start, then every TTL/3.
    sleep_until(start + Duration::from_secs(35)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert!(!healthy.is_fired());
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_server_is_retried_then_lost_before_the_ttl() {
    let renewer = Renewer::new();
    let notifier = LossNotifier::new();
    let start = Instant::now();
    let validity = validity(TTL);
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = attempts.clone();
    let _task = renewer.schedule(
        "test",
        TTL,
        validity.clone(),
        notifier.clone(),
        Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Err(Error::unavailable("server down")) }.boxed()
        }),
    );
    let reason = notifier.signal().lost().await;
    assert_eq!(reason, LostReason::DeadlineMissed);
    assert!(start.elapsed() < TTL, "lost after {:?}", start.elapsed());
    assert!(!validity.is_valid());
    assert!(
        attempts.load(Ordering::SeqCst) > 1,
        "retried before giving up"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_due_sooner_wakes_the_sleeping_driver() {
    let renewer = Renewer::new();
    let (_, renew) = counting();
    let _long = renewer.schedule("test", TTL, validity(TTL), LossNotifier::new(), renew);
    // The driver now sleeps until TTL/3 = 10 s.
    tokio::task::yield_now().await;
    let short_ttl = Duration::from_secs(3);
    let (calls, renew) = counting();
    let _short = renewer.schedule(
        "test",
        short_ttl,
        validity(short_ttl),
        LossNotifier::new(),
        renew,
    );
    sleep(short_ttl / 3 + Duration::from_millis(1)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "renewed after 1 s, not 10 s"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_gone_on_the_server_is_lost_at_its_first_renewal() {
    let renewer = Renewer::new();
    let notifier = LossNotifier::new();
    let start = Instant::now();
    let _task = renewer.schedule(
        "test",
        TTL,
        validity(TTL),
        notifier.clone(),
        Box::new(|| async { Err(Error::lease_lost("lease 7 not found")) }.boxed()),
    );
    let reason = notifier.signal().lost().await;
    assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
    // The first renewal comes at the lease's phase: TTL/6 to TTL/3.
    let first = start.elapsed();
    assert!(
        (TTL / 6..=TTL / 3).contains(&first),
        "first renewal at {first:?}"
    );
    tokio::task::yield_now().await;
    assert_eq!(alive_tasks(), 0, "a lost lease leaves the schedule");
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_are_reported_until_one_succeeds() {
    let renewer = Renewer::new();
    let notifier = LossNotifier::new();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = failing.clone();
    let _task = renewer.schedule(
        "test",
        TTL,
        validity(TTL),
        notifier.clone(),
        Box::new(move || {
            let failing = flag.load(Ordering::SeqCst);
            async move {
                match failing {
                    true => Err(Error::unavailable("server down")),
                    false => Ok(()),
                }
            }
            .boxed()
        }),
    );
    let signal = notifier.signal();
    assert_eq!(signal.renewal_failure(), None);
    signal.renewal_changed(false).await;
    let failure = signal.renewal_failure().expect("renewal is failing");
    assert!(failure.contains("server down"), "{failure}");
    assert!(
        !signal.is_lost(),
        "a failing renewal with validity left is a warning"
    );
    failing.store(false, Ordering::SeqCst);
    signal.renewal_changed(true).await;
    assert_eq!(
        signal.renewal_failure(),
        None,
        "recovered at the next retry"
    );
    assert!(!signal.is_lost());
}
