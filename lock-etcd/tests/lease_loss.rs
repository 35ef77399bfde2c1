//! Losing a lease: behind a network partition, while waiting in the queue,
//! and what a guarded write does afterwards.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackend, LockBackendExt, LockGuard, LostReason};
use distlock_etcd::{EtcdBackend, is_owner_of};
use distlock_testkit::assert::joined;
use distlock_testkit::proxy::FaultProxy;
use etcd_client::{EventType, GetOptions, Txn, TxnOp};
use support::{Held, QueueWatch};
use tokio::time::timeout;

const SLACK: Duration = Duration::from_secs(3);

/// One etcd where a client that reaches it only through a fault proxy
/// holds `name`: the etcd with that client, the proxy, a client that
/// reaches etcd directly, and the guard.
async fn held_behind_proxy(name: &str) -> (Held, FaultProxy, EtcdBackend, LockGuard) {
    let cluster = support::start_cluster(1).await;
    let (proxy, holder) = support::behind_proxy(&cluster, support::config_for).await;
    let direct = support::backend(&cluster).await;
    let held = holder.lock(name).await.expect("lock");
    (Held { cluster, holder }, proxy, direct, held)
}

#[tokio::test]
async fn holder_cut_off_past_its_ttl_gets_its_lost_signal_and_another_acquires() {
    let (_etcd, proxy, direct, held) = held_behind_proxy("partition/lock").await;
    let first_token = held.token();
    proxy.blackhole();
    // The keepalive cannot get through: the local validity deadline (TTL
    // minus drift) passes and the signal fires, at most about one TTL later.
    let reason = timeout(support::TTL + SLACK, held.lost())
        .await
        .expect("the cut-off holder must learn that its lock is gone");
    assert!(
        matches!(
            reason,
            LostReason::DeadlineMissed | LostReason::RenewalFailed(_)
        ),
        "{reason}"
    );
    assert!(!held.is_held());

    let next = timeout(support::TTL * 3 + SLACK, direct.lock("partition/lock"))
        .await
        .expect("another client acquires once the lease expired")
        .expect("lock");
    assert!(next.token() > first_token);

    proxy.restore();
    distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::LeaseLost, ErrorKind::NotHeld],
        "the lock was lost",
        timeout(SLACK * 2, held.release())
            .await
            .expect("release after the partition must not hang"),
    );
    let still = direct
        .try_lock("partition/lock")
        .await
        .expect_err("still held");
    assert_eq!(still.kind(), ErrorKind::WouldBlock);
    next.release().await.expect("release");
}

/// A renewal asked for by hand whose answer arrives only after the
/// validity deadline cannot vouch for the lease: `renew()` fails with
/// `LeaseLost`, as the lost signal already said, and never returns `Ok`.
#[tokio::test]
async fn a_renewal_answered_after_the_validity_deadline_is_lease_lost() {
    let (_etcd, proxy, _direct, held) = held_behind_proxy("renew/late").await;
    proxy.blackhole();
    distlock_testkit::assert::within(SLACK, "the validity runs low", async {
        while held.remaining_validity().expect("etcd keeps a deadline") > Duration::from_millis(150)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // Sent now, held back by the blackhole until the deadline has passed;
    // its answer then comes well within the renewal's own timeout (TTL/3).
    let renewal = held.renew();
    tokio::pin!(renewal);
    let reason = tokio::select! {
        result = &mut renewal => panic!("the renewal ended before the deadline: {result:?}"),
        reason = held.lost() => reason,
    };
    assert_eq!(reason, LostReason::DeadlineMissed);
    proxy.restore();
    let result = timeout(SLACK, renewal).await.expect("the renewal ends");
    let e = result.expect_err("a renewal answered after the deadline cannot vouch for the lease");
    assert_eq!(e.kind(), ErrorKind::LeaseLost, "{e}");
    assert!(!held.is_held());
}

#[tokio::test]
async fn a_waiter_whose_lease_ends_gets_lease_lost_not_the_lock() {
    let (etcd, b, held) = support::contended("waiter/expiry").await;
    // Watch the queue for the waiter's key (the one that is not the
    // holder's), then end its lease from outside, as an expiry would (etcd
    // issue 11456).
    let mut watch = support::watch_queue_of(&etcd.cluster, held.key()).await;
    let waiting = tokio::spawn(async move {
        b.lock_timeout("waiter/expiry", Duration::from_secs(30))
            .await
    });
    let waiter_key = timeout(SLACK, support::next_put_key(&mut watch.events))
        .await
        .expect("the waiter joins the queue");
    support::revoke_lease_of(&etcd.cluster, &waiter_key).await;

    let err = joined(
        support::TTL + SLACK,
        "the waiter must give up once its lease is gone",
        waiting,
    )
    .await
    .expect_err("its queue entry is gone");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(!err.is_retryable());
    assert!(held.is_held());
    held.release().await.expect("release");
}

/// The guarded writes under the names every backend shares: a holder whose
/// lease ended on the server is refused, and the next holder, with a higher
/// token, writes.
#[tokio::test]
async fn guarded_put_and_delete_refuse_a_holder_whose_lease_ended() {
    let cluster = support::start_cluster(1).await;
    let (a, b) = (
        support::backend(&cluster).await,
        support::backend(&cluster).await,
    );
    assert!(a.capabilities().guarded_writes);
    let mut client = a.client();
    let first = a.lock("guarded/named").await.expect("lock");
    a.guarded_put(&first, "/guarded/named", "one")
        .await
        .expect("guarded put while held");
    assert!(a.is_owner(&first).await.expect("is_owner"));

    support::revoke_lease_of(&cluster, first.key()).await;
    let second = timeout(SLACK, b.lock("guarded/named"))
        .await
        .expect("the next holder in time")
        .expect("the next holder");
    assert!(second.token() > first.token());
    for err in [
        a.guarded_put(&first, "/guarded/named", "late")
            .await
            .unwrap_err(),
        a.guarded_delete(&first, "/guarded/named")
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    }
    assert!(!a.is_owner(&first).await.expect("is_owner"));
    b.guarded_put(&second, "/guarded/named", "two")
        .await
        .expect("the next holder writes");
    let stored = client.get("/guarded/named", None).await.unwrap();
    assert_eq!(stored.kvs()[0].value(), b"two");
    assert!(b.guarded_delete(&second, "/guarded/named").await.unwrap());
    second.release().await.expect("release");
}

#[tokio::test]
async fn guarded_write_commits_only_while_the_lock_is_held() {
    let cluster = support::start_cluster(1).await;
    let backend = support::backend(&cluster).await;
    let mut client = backend.client();
    let guard = backend.lock("guarded/write").await.expect("lock");
    let write = |value: &str| {
        Txn::new()
            .when([is_owner_of(&guard)])
            .and_then([TxnOp::put("/guarded/data", value, None)])
    };
    assert!(client.txn(write("held")).await.unwrap().succeeded());

    support::revoke_lease_of(&cluster, guard.key()).await;
    timeout(support::TTL + SLACK, guard.lost())
        .await
        .expect("lost signal after the lease was revoked");
    assert!(!client.txn(write("stale")).await.unwrap().succeeded());
    let stored = client.get("/guarded/data", None).await.unwrap();
    assert_eq!(stored.kvs()[0].value(), b"held");

    // A newer holder of the same lock does not make the old guard an owner.
    let newer = backend.lock("guarded/write").await.expect("lock again");
    assert!(!client.txn(write("stale again")).await.unwrap().succeeded());
    let ok = Txn::new().when([is_owner_of(&newer)]).and_then([TxnOp::put(
        "/guarded/data",
        "newer",
        None,
    )]);
    assert!(client.txn(ok).await.unwrap().succeeded());
    newer.release().await.expect("release");
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_no_key_behind() {
    let (etcd, b, held) = support::contended("cancel/cleanup").await;
    let QueueWatch {
        mut raw,
        queue,
        mut events,
    } = support::watch_queue_of(&etcd.cluster, held.key()).await;

    let cancelled = timeout(Duration::from_millis(300), b.lock("cancel/cleanup")).await;
    assert!(cancelled.is_err(), "b must still be waiting when cancelled");
    // The waiter's key was put, and its deletion follows the cancellation.
    let deleted = timeout(SLACK, async {
        loop {
            let message = events.message().await.unwrap().unwrap();
            if message
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return;
            }
        }
    })
    .await;
    assert!(
        deleted.is_ok(),
        "the cancelled waiter's key was never deleted"
    );
    let left = raw
        .get(queue.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(left.kvs().len(), 1, "only the holder's key is left");
    assert_eq!(left.kvs()[0].key(), held.key().as_bytes());
    held.release().await.expect("release");
}

#[tokio::test]
async fn try_lock_on_a_held_lock_writes_nothing() {
    let (etcd, b, held) = support::contended("try/no-write").await;
    let mut raw = support::raw_client(&etcd.cluster).await;
    let before = support::revision(&mut raw).await;
    for _ in 0..5 {
        let err = b.try_lock("try/no-write").await.expect_err("held");
        assert_eq!(err.kind(), ErrorKind::WouldBlock);
    }
    let after = support::revision(&mut raw).await;
    assert_eq!(before, after, "a failed try_lock must not write to etcd");
    held.release().await.expect("release");
}

#[tokio::test]
async fn cancelled_renewals_never_let_a_cut_off_holder_outlast_its_lease() {
    let (_etcd, proxy, other, held) = held_behind_proxy("renew/cancelled").await;
    let waiter = tokio::spawn(async move {
        other
            .lock_timeout("renew/cancelled", Duration::from_secs(10))
            .await
    });

    // Renewals cancelled after their keepalive went out on the open
    // keepalive stream: each answer arrives after nobody waits for it.
    held.renew()
        .await
        .expect("a renewal opens the keepalive stream");
    proxy.delay(Duration::from_millis(50));
    for _ in 0..3 {
        let cancelled = timeout(Duration::from_millis(20), held.renew()).await;
        assert!(
            cancelled.is_err(),
            "a renewal took under 20 ms through the delay"
        );
    }
    // Let those answers arrive (four times the proxy's round trip), then
    // cut the holder off.
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.blackhole();

    let next = joined(
        support::TTL * 3 + SLACK,
        "the waiter acquires once the holder's lease expired",
        waiter,
    )
    .await
    .expect("lock");
    assert!(
        !held.is_held(),
        "the cut-off holder still reports is_held() while another client holds the lock"
    );
    assert!(next.token() > held.token());
    next.release().await.expect("release");
}

#[tokio::test]
async fn an_idle_lease_revoked_on_the_server_is_replaced_by_a_fresh_one() {
    let cluster = support::start_cluster(1).await;
    // A long TTL: the idle lease's keepalive must not notice the revoke
    // before the next acquire takes the lease.
    let config = support::config_for(cluster.endpoints()).with_default_ttl(Duration::from_secs(10));
    let backend = EtcdBackend::connect(config).await.expect("connect");
    for wait in ["lock", "try_lock"] {
        let name = format!("pool/revoked/{wait}");
        let first = backend.lock(name.as_str()).await.expect("lock");
        let key = first.key().to_owned();
        first.release().await.expect("release");
        // The released guard's lease now waits in the pool; end it.
        support::revoke_lease_of(&cluster, &key).await;
        let again = match wait {
            "lock" => backend.lock(name.as_str()).await,
            _ => backend.try_lock(name.as_str()).await,
        }
        .unwrap_or_else(|e| panic!("{wait} after the idle lease was revoked: {e}"));
        assert_ne!(again.key(), key, "{wait}: a fresh lease, so a new key");
        assert!(again.is_held());
        again.release().await.expect("release");
    }
}
