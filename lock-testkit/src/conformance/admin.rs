//! Properties of the operator's view: inspect, list and force_release.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_core::{
    AcquireOptions, Candidacy, DynLockBackend, ErrorKind, LockBackendExt, LockName, LostReason,
    Primitive, Wait,
};

use super::{SLACK, Target, within};
use crate::assert::{
    evicts, fails_with_one_of, holders_listed, inspect_until, joined, token_after,
};

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid name")
}

fn labelled(label: &str) -> AcquireOptions {
    AcquireOptions::new().holder(label)
}

/// `true` when the backend declares no support; then the call must say
/// `Unsupported` rather than pretend.
async fn declared_unsupported(client: &DynLockBackend, supported: bool, what: &str) -> bool {
    if supported {
        return false;
    }
    let lock = name("conformance/admin/unsupported");
    let err = match what {
        "inspect" => client.inspect(&lock).await.map(|_| ()),
        "list" => client.list_all("conformance/").await.map(|_| ()),
        _ => client.force_release(&lock).await.map(|_| ()),
    }
    .expect_err("an undeclared admin operation must fail");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    eprintln!(
        "{} has no {what}; nothing more to check",
        client.capabilities().backend
    );
    true
}

/// A holder's client and an operator's, when the backend can break locks;
/// `None`, after saying so, when it declares `force_release` unsupported.
async fn holder_and_breaker(
    target: &dyn Target,
) -> Option<(Arc<DynLockBackend>, Arc<DynLockBackend>)> {
    let (holder, operator) = (target.client().await, target.client().await);
    let supported = operator.capabilities().admin.force_release;
    if declared_unsupported(&*operator, supported, "force_release").await {
        return None;
    }
    Some((holder, operator))
}

/// `inspect` shows the real holder (its description, token and key, and
/// its lease and start where declared) and counts the waiters queued
/// behind it; a free lock shows nobody.
pub async fn inspect_shows_the_holder_and_its_waiters(target: &dyn Target) {
    let (holder, waiter, observer) = (
        target.client().await,
        target.client().await,
        target.client().await,
    );
    let caps = observer.capabilities();
    if declared_unsupported(&*observer, caps.admin.inspect, "inspect").await {
        return;
    }
    let lock = name("conformance/admin/inspect");
    let free = observer.inspect(&lock).await.expect("inspect a free lock");
    assert!(free.holder.is_none() && free.waiting == 0, "{free:?}");

    let before = SystemTime::now() - Duration::from_secs(60);
    let guard = holder
        .acquire(&lock, &labelled("conformance-holder"))
        .await
        .expect("lock");
    let queued = tokio::spawn({
        let lock = lock.clone();
        async move { waiter.acquire(&lock, &labelled("conformance-waiter")).await }
    });
    let status = inspect_until(&*observer, &lock, SLACK, "the waiter shows", |s| {
        s.waiting == 1
    })
    .await;
    let shown = status.holder.as_ref().expect("a holder");
    assert_eq!(shown.token, guard.token(), "{status:?}");
    assert_eq!(shown.key, guard.key(), "{status:?}");
    assert_eq!(
        shown.description.as_deref(),
        Some("conformance-holder"),
        "{status:?}"
    );
    if caps.admin.lease_left {
        let left = shown.lease_left.expect("declared lease_left");
        assert!(
            left <= guard.ttl() + SLACK,
            "{left:?} left of {:?}",
            guard.ttl()
        );
    }
    if caps.admin.acquired_at {
        let at = shown.acquired_at.expect("declared acquired_at");
        let after = SystemTime::now() + Duration::from_secs(60);
        assert!(before < at && at < after, "acquired at {at:?}");
    }
    if caps.admin.waiters {
        assert_eq!(status.waiters.len(), 1, "{status:?}");
        assert_eq!(
            status.waiters[0].description.as_deref(),
            Some("conformance-waiter"),
            "{status:?}"
        );
    }

    guard.release().await.expect("release");
    let next = joined(SLACK, "the waiter gets in", queued)
        .await
        .expect("waiter acquires");
    let status = inspect_until(
        &*observer,
        &lock,
        SLACK,
        "the waiter shows as holder",
        |s| s.holder.as_ref().map(|h| h.token) == Some(next.token()),
    )
    .await;
    assert_eq!(status.waiting, 0, "{status:?}");
    next.release().await.expect("release");
    inspect_until(&*observer, &lock, SLACK, "the lock shows free", |s| {
        !s.is_held()
    })
    .await;
}

/// Without a label, a grant is described by `host:pid`, so an operator can
/// find the process.
pub async fn holder_is_described_by_host_and_pid_by_default(target: &dyn Target) {
    let client = target.client().await;
    if declared_unsupported(&*client, client.capabilities().admin.inspect, "inspect").await {
        return;
    }
    let lock = name("conformance/admin/default-holder");
    let guard = client
        .acquire(&lock, &AcquireOptions::new())
        .await
        .expect("lock");
    let status = client.inspect(&lock).await.expect("inspect");
    let description = status
        .holder
        .and_then(|h| h.description)
        .expect("a description");
    assert!(
        description.ends_with(&format!(":{}", std::process::id())),
        "{description}"
    );
    guard.release().await.expect("release");
}

/// `list` finds every held name under a prefix, with its holder's token,
/// and nothing outside it; elections are listed as such.
pub async fn list_finds_every_held_name_under_a_prefix(target: &dyn Target) {
    let client = target.client().await;
    let caps = client.capabilities();
    if declared_unsupported(&*client, caps.admin.list, "list").await {
        return;
    }
    let mut guards = Vec::new();
    for text in [
        "conformance/admin/list/a",
        "conformance/admin/list/b/c",
        "conformance/admin/other",
    ] {
        guards.push(client.lock(text).await.expect("lock"));
    }
    let leadership = if caps.election {
        let election = target.election_client().await;
        let leader = election
            .campaign(&name("conformance/admin/list/e"), Candidacy::new("leader"))
            .await
            .expect("campaign");
        Some(leader)
    } else {
        None
    };
    let listed = client
        .list_all("conformance/admin/list/")
        .await
        .expect("list");
    assert_eq!(
        holders_listed(&listed, Primitive::Lock),
        [
            ("conformance/admin/list/a", Some(guards[0].token())),
            ("conformance/admin/list/b/c", Some(guards[1].token())),
        ],
        "{listed:?}"
    );
    if let Some(leadership) = leadership {
        assert_eq!(
            holders_listed(&listed, Primitive::Election),
            [("conformance/admin/list/e", Some(leadership.token()))],
            "{listed:?}"
        );
        leadership.resign().await.expect("resign");
    }
    let paged = client
        .list(&distlock_core::ListOptions::prefix("conformance/admin/list/").limit(1))
        .await
        .expect("list one page");
    assert_eq!(paged.locks.len(), 1, "{paged:?}");
    assert!(
        paged.next.is_some(),
        "a page of one must continue: {paged:?}"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// `force_release` evicts a holder of another client: it returns the
/// evicted token, the evicted guard's lost signal fires with `Revoked`
/// within its detection bound, and the next grant's token is higher.
/// Breaking a free lock evicts nobody.
pub async fn force_release_evicts_the_holder_and_the_next_token_is_higher(target: &dyn Target) {
    let Some((holder, operator)) = holder_and_breaker(target).await else {
        return;
    };
    let lock = name("conformance/admin/break");
    assert_eq!(
        operator
            .force_release(&lock)
            .await
            .expect("break a free lock"),
        None
    );
    let guard = holder
        .acquire(&lock, &labelled("stuck"))
        .await
        .expect("lock");
    let evicted = evicts(&*operator, &lock).await;
    assert_eq!(evicted.token, guard.token(), "{evicted:?}");
    assert_eq!(evicted.description.as_deref(), Some("stuck"), "{evicted:?}");
    let reason = within(
        target.ttl() * 2 + SLACK,
        "the evicted holder's lost signal",
        guard.lost(),
    )
    .await;
    assert_eq!(reason, LostReason::Revoked);
    assert!(!guard.is_held());
    let next = operator
        .acquire(&lock, &AcquireOptions::new().wait(Wait::Timeout(SLACK)))
        .await
        .expect("the broken lock is free");
    token_after(evicted.token, next.token());
    fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "the evicted guard holds nothing",
        guard.release().await,
    );
    assert!(
        next.is_held(),
        "releasing the evicted guard must not touch the new holder"
    );
    next.release().await.expect("release");
}

/// A guard whose lock was broken with `force_release` fails its release
/// with `LeaseLost` on every backend, whether it has noticed the break yet
/// or not (`NotHeld` is for a guard its own process gave up). The same
/// holds for a leadership broken by its election's name: `inspect` shows
/// the leader by its value, and its `resign` fails with `LeaseLost`.
pub async fn releasing_a_broken_guard_is_lease_lost(target: &dyn Target) {
    let Some((holder, operator)) = holder_and_breaker(target).await else {
        return;
    };
    // Released at once after the break, before its renewal can notice.
    let unaware = name("conformance/admin/break-unaware");
    let guard = holder
        .acquire(&unaware, &labelled("a"))
        .await
        .expect("lock");
    evicts(&*operator, &unaware).await;
    let err = guard
        .release()
        .await
        .expect_err("a broken guard holds nothing");
    assert_eq!(
        err.kind(),
        ErrorKind::LeaseLost,
        "right after the break: {err}"
    );

    // Released once its lost signal said `Revoked`.
    let aware = name("conformance/admin/break-aware");
    let guard = holder.acquire(&aware, &labelled("b")).await.expect("lock");
    evicts(&*operator, &aware).await;
    let reason = within(
        target.ttl() * 2 + SLACK,
        "the evicted holder's lost signal",
        guard.lost(),
    )
    .await;
    assert_eq!(reason, LostReason::Revoked);
    let err = guard
        .release()
        .await
        .expect_err("a broken guard holds nothing");
    assert_eq!(
        err.kind(),
        ErrorKind::LeaseLost,
        "after the lost signal: {err}"
    );

    if !operator.capabilities().election {
        return;
    }
    let candidate = target.election_client().await;
    let election = name("conformance/admin/break-leader");
    let leadership = candidate
        .campaign(&election, Candidacy::new("leader-value"))
        .await
        .expect("campaign");
    let status = operator.inspect(&election).await.expect("inspect");
    assert_eq!(status.primitive, Primitive::Election, "{status:?}");
    let leader = status.holder.expect("the leader is shown");
    assert_eq!(leader.token, leadership.token(), "{leader:?}");
    assert_eq!(
        leader.description.as_deref(),
        Some("leader-value"),
        "{leader:?}"
    );
    let evicted = operator
        .force_release(&election)
        .await
        .expect("break the leadership")
        .expect("the leader was evicted");
    assert_eq!(evicted.token, leadership.token());
    let err = leadership
        .resign()
        .await
        .expect_err("a broken leadership holds nothing");
    assert_eq!(
        err.kind(),
        ErrorKind::LeaseLost,
        "resign after the break: {err}"
    );
}
