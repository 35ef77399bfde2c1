//! Writes that land late or keys that reappear: a `try_lock` attempt that
//! timed out but was applied after its retry, and a key recreated behind a
//! holder's back.

mod support;

use distlock_etcd::ClientConfig;
use std::net::SocketAddr;
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_etcd::{EtcdBackend, lease_of_key};
use distlock_testkit::assert::acquired_and_released;
use distlock_testkit::proxy::FaultProxy;
use etcd_client::{EventType, PutOptions};
use tokio::time::{Instant, timeout};

const REQUEST_TIMEOUT: Duration = Duration::from_millis(600);
/// One attempt of a retried request gets a third of the request timeout.
const ATTEMPT: Duration = Duration::from_millis(200);
const SLACK: Duration = Duration::from_secs(3);
/// Lease TTL of the client whose try_lock lands late.
const TTL: Duration = Duration::from_secs(2);

/// Polls `try_lock` until it succeeds, for 3×TTL at most, and releases:
/// whatever a late write left on the name went with its lease.
async fn until_free(backend: &EtcdBackend, name: &str) {
    let guard = timeout(TTL * 3 + SLACK, async {
        loop {
            match backend.try_lock(name).await {
                Ok(guard) => return guard,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("unexpected: {e}"),
            }
        }
    })
    .await
    .expect("the name must be free within 3×TTL of a late write");
    guard.release().await.expect("release");
}

/// Puts a lease in the pool through fast links, so that only the next
/// acquisition's Txn is slow.
async fn warm_lease_pool(client: &EtcdBackend) {
    acquired_and_released("warm up", client.lock("late/warm")).await;
}

/// One etcd member behind two proxies, and a client of both: whatever
/// the test makes slow goes through `slow`, the retries through `fast`.
async fn slow_and_fast() -> (
    distlock_testkit::servers::EtcdCluster,
    FaultProxy,
    FaultProxy,
    EtcdBackend,
) {
    let cluster = support::start_cluster(1).await;
    let upstream: SocketAddr = cluster.endpoints()[0].parse().unwrap();
    let slow = FaultProxy::start(upstream).await.expect("proxy");
    let fast = FaultProxy::start(upstream).await.expect("proxy");
    let config = support::config_for(vec![slow.addr().to_string(), fast.addr().to_string()])
        .with_request_timeout(REQUEST_TIMEOUT)
        .with_default_ttl(TTL);
    let client = EtcdBackend::connect(config).await.expect("connect");
    (cluster, slow, fast, client)
}

#[tokio::test]
async fn a_try_lock_applied_after_its_retry_never_keeps_the_name_blocked() {
    let (cluster, slow, _fast, client) = slow_and_fast().await;
    let holder = support::backend(&cluster).await;
    let other = support::backend(&cluster).await;
    let name = "late/try-lock";

    // A try_lock whose first attempt goes through the slow proxy times out
    // there and is retried on the fast one, which finds the lock held. The
    // holder releases at once; then the first attempt reaches etcd and,
    // the queue being empty, writes the client's key.
    let mut raw = support::raw_client(&cluster).await;
    let mut orphan = None;
    let mut slow_would_block = false;
    for _ in 0..20 {
        warm_lease_pool(&client).await;
        let held = holder.lock(name).await.expect("lock");
        let queue = support::queue_of(held.key());
        let mut events = support::watch_queue(&mut raw, &queue).await;
        slow.delay(Duration::from_millis(250));
        let sent = Instant::now();
        let result = client.try_lock(name).await;
        let took = sent.elapsed();
        slow.delay(Duration::ZERO);
        held.release().await.expect("release");
        match result {
            // Every attempt went the slow way: in doubt, so the lease was
            // revoked; once the name is free, try again.
            Err(e) if e.kind() == ErrorKind::Timeout => {
                until_free(&other, name).await;
                continue;
            }
            // The first attempt went the fast way: nothing can land late.
            Err(e) if e.kind() == ErrorKind::WouldBlock && took < ATTEMPT => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("unexpected: {e}"),
            Ok(guard) => panic!("acquired a held lock: {guard:?}"),
        }
        // The late attempt's put, if the queue was still empty when it
        // landed (and the lease was still there: revoking it first is
        // just as good).
        orphan = timeout(Duration::from_secs(1), support::next_put_key(&mut events))
            .await
            .ok();
        slow_would_block = true;
        // Revoking the lease before the late put lands is just as good, but
        // try for a case where the put did land.
        if orphan.is_some() {
            break;
        }
    }
    assert!(slow_would_block, "no try_lock attempt went the slow way");
    eprintln!("late try_lock write: {orphan:?}");

    // Whatever the late attempt wrote must go with a lease nobody renews.
    until_free(&other, name).await;
}

#[tokio::test]
async fn release_never_deletes_a_key_recreated_under_the_same_name() {
    let cluster = support::start_cluster(1).await;
    let backend = support::backend(&cluster).await;
    let mut raw = support::raw_client(&cluster).await;
    let guard = backend.lock("late/recreated").await.expect("lock");
    let key = guard.key().to_owned();
    assert!(lease_of_key(&key).is_some(), "{key}");

    // The key goes and comes back, with a new create revision (on a lease
    // of its own, so revoking the guard's lease leaves it alone).
    let lease = raw.lease_grant(10, None).await.expect("grant").id();
    raw.delete(key.as_str(), None).await.expect("delete");
    raw.put(
        key.as_str(),
        "someone else",
        Some(PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put again");
    let _ = guard.release().await;

    let left = raw.get(key.as_str(), None).await.expect("get");
    assert_eq!(
        left.kvs().len(),
        1,
        "release deleted a key that is not the guard's any more"
    );
    assert_eq!(left.kvs()[0].value(), b"someone else");
}

#[tokio::test]
async fn a_lock_won_on_a_retry_never_leaves_its_late_first_attempt_holding_the_name() {
    let (cluster, slow, _fast, client) = slow_and_fast().await;
    let other = support::backend(&cluster).await;
    let mut raw = support::raw_client(&cluster).await;
    let queue = format!("{}/lock/late%2Fretried/", support::PREFIX);

    // An acquire whose first attempt goes the slow way times out there and
    // wins on the fast one. It is released at once; then the first attempt
    // reaches etcd and, the queue being empty, writes the key again.
    // Stop once a late write was seen, or after a few rounds where one
    // could have landed (revoking the lease first is just as good).
    let (mut late, mut slow_rounds) = (false, 0);
    for round in 0..20 {
        for wait in ["lock", "try_lock"] {
            warm_lease_pool(&client).await;
            let mut events = support::watch_queue(&mut raw, &queue).await;
            slow.delay(Duration::from_millis(250));
            let sent = Instant::now();
            let guard = match wait {
                "lock" => client.lock("late/retried").await,
                _ => client.try_lock("late/retried").await,
            };
            let took = sent.elapsed();
            slow.delay(Duration::ZERO);
            let Ok(guard) = guard else {
                // Every attempt went the slow way: wait until the name is
                // free and try again.
                until_free(&other, "late/retried").await;
                continue;
            };
            guard.release().await.expect("release");
            if took < ATTEMPT {
                continue; // The first attempt went the fast way.
            }
            // Our put, our delete, then perhaps the late put.
            let puts = timeout(Duration::from_secs(1), async {
                let mut puts = 0;
                while puts < 2 {
                    let message = events.message().await.unwrap().unwrap();
                    puts += message
                        .events()
                        .iter()
                        .filter(|e| e.event_type() == EventType::Put)
                        .count();
                }
                puts
            })
            .await
            .unwrap_or(1);
            eprintln!("round {round}, {wait}: won after {took:?}; {puts} puts seen");
            // Whatever the late attempt wrote must go with a lease nobody
            // renews.
            until_free(&other, "late/retried").await;
            late |= puts >= 2;
            slow_rounds += 1;
        }
        if late || slow_rounds >= 4 {
            break;
        }
    }
    assert!(slow_rounds > 0, "no acquire attempt went the slow way");
}
