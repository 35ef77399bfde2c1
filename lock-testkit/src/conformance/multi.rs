//! Properties of multi-locks: all-or-nothing, no deadlock between
//! overlapping sets, and one lost signal for the whole set.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    DynLockBackend, ErrorKind, FencingToken, LockBackendExt, LockName, LostReason, MultiLockGuard,
    Result,
};

use super::{SLACK, Target, within};
use crate::assert::{evicts, fails_with_one_of};

/// Critical sections per client in the deadlock case.
const ROUNDS: usize = 100;

/// While another client holds `b`, `try_lock_all([a, b])` fails with
/// `WouldBlock` naming `b`, and a bounded wait with `Timeout` naming `b`;
/// afterwards `a` is free for a third client: a failed set holds nothing.
pub async fn multi_lock_is_all_or_nothing(target: &dyn Target) {
    let (a, b) = ("conformance/multi/all/a", "conformance/multi/all/b");
    let (_holder, held, group) = super::one_holds(target, b).await;
    let third = target.client().await;
    let refused = within(SLACK, "try_lock_all", group.try_lock_all(&[a, b])).await;
    names_the_busy_member(ErrorKind::WouldBlock, b, refused);
    free_at_once(&*third, a, "a was released when the set failed").await;

    let wait = Duration::from_millis(300);
    let reversed = [b, a];
    let timed = group.lock_all_timeout(&reversed, wait);
    let refused = within(wait + SLACK, "lock_all_timeout", timed).await;
    names_the_busy_member(ErrorKind::Timeout, b, refused);
    free_at_once(&*third, a, "a was released when the set timed out").await;
    held.release().await.expect("release b");
}

/// Two clients lock {a, b} and {b, a} 100 times each, with a non-atomic
/// read-modify-write of a shared counter inside: no deadlock, the count is
/// exact, and each member's tokens strictly increase across holders.
pub async fn multi_locks_in_opposite_orders_do_not_deadlock(target: &dyn Target) {
    let (a, b) = ("conformance/multi/order/a", "conformance/multi/order/b");
    let counter = Arc::new(AtomicU64::new(0));
    let tokens: Arc<Mutex<Vec<(FencingToken, FencingToken)>>> = Arc::default();
    let mut tasks = Vec::new();
    for names in [[a, b], [b, a]] {
        let client = target.client().await;
        let (counter, tokens) = (counter.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let group = client
                    .lock_all_timeout(&names, Duration::from_secs(30))
                    .await
                    .expect("lock_all");
                let both = (group.token_of(a).unwrap(), group.token_of(b).unwrap());
                tokens.lock().unwrap().push(both);
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                group.release().await.expect("release");
            }
        }));
    }
    super::join_within(Duration::from_secs(60), "opposite-order rounds", tasks).await;
    assert_eq!(counter.load(Ordering::SeqCst), 2 * ROUNDS as u64);
    let tokens = tokens.lock().unwrap();
    assert!(
        tokens
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1),
        "a member's tokens did not strictly increase: {tokens:?}"
    );
}

/// Evicting one member of a held set fires the set's lost signal with that
/// member's reason; the set is then not held, and releasing it frees the
/// other member.
pub async fn a_lost_member_fires_the_multi_lock_lost_signal(target: &dyn Target) {
    let (a, b) = ("conformance/multi/lost/a", "conformance/multi/lost/b");
    let (holder, operator) = (target.client().await, target.client().await);
    if !operator.capabilities().admin.force_release {
        eprintln!(
            "{} has no force_release; nothing to check",
            operator.capabilities().backend
        );
        return;
    }
    let group = holder.lock_all(&[a, b]).await.expect("lock_all");
    let evicted = evicts(&*operator, &LockName::new(b).unwrap()).await;
    assert_eq!(Some(evicted.token), group.token_of(b), "{evicted:?}");
    let detection = target.ttl() * 2 + SLACK;
    let reason = within(detection, "the set's lost signal", group.lost()).await;
    let member = group.lost_member().map(LockName::as_str);
    assert_eq!((reason, member), (LostReason::Revoked, Some(b)));
    assert!(!group.is_held());
    let released = group.release().await;
    let what = "releasing a set whose member was evicted";
    fails_with_one_of(&[ErrorKind::NotHeld, ErrorKind::LeaseLost], what, released);
    free_at_once(&*operator, a, "a was released with the set").await;
}

/// A `lock_all` future dropped while it waits for a busy member gives up
/// the members it took and its place in the member's queue: neither blocks
/// another client beyond the TTL.
pub async fn a_cancelled_multi_lock_frees_its_members(target: &dyn Target) {
    let (a, b) = ("conformance/multi/cancel/a", "conformance/multi/cancel/b");
    let (_holder, held, group) = super::one_holds(target, b).await;
    let third = target.client().await;
    let cancelled = tokio::time::timeout(Duration::from_millis(300), group.lock_all(&[a, b])).await;
    assert!(
        cancelled.is_err(),
        "the set must still wait for b when cancelled"
    );
    held.release().await.expect("release b");
    let bound = target.ttl() + SLACK;
    let both = within(bound, "a third client's set", third.lock_all(&[a, b]))
        .await
        .expect("the cancelled set left neither a nor b taken");
    both.release().await.expect("release");
}

/// The set's acquisition failed with `kind`, and its message names `busy`.
#[track_caller]
fn names_the_busy_member(kind: ErrorKind, busy: &str, result: Result<MultiLockGuard>) {
    let err = result.expect_err("a member is held by another client");
    assert_eq!(err.kind(), kind, "{err}");
    assert!(err.message().contains(&format!("lock {busy} ")), "{err}");
}

/// `client` takes `name` at once, and releases it.
async fn free_at_once(client: &DynLockBackend, name: &str, why: &str) {
    let guard = within(SLACK, "try_lock", client.try_lock(name))
        .await
        .expect(why);
    guard.release().await.expect("release");
}
