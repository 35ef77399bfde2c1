//! A departure wakes the waiters without a read: they see their turn in
//! their backend's view of the queue, so a hand-off costs etcd the
//! releaser's delete and one linearizable read, by the waiter let in, that
//! confirms its turn. The waiters still waiting read nothing. Counted from
//! etcd's own request metrics.

mod support;

use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_etcd::EtcdBackend;
use distlock_testkit::assert::joined;
use distlock_testkit::servers::EtcdCluster;
use support::{config_for, next_put_key, raw_client, shared_queue, start_cluster, watch_queue};

const SLACK: Duration = Duration::from_secs(10);
/// Long enough that no waiter's periodic re-read (every TTL/3) falls into
/// the test.
const TTL: Duration = Duration::from_secs(60);
/// A view re-reads the queue a few times within etcd's 100 ms sync period
/// after its watch is created; the counts start after that.
const YOUNG_VIEW: Duration = Duration::from_millis(200);

async fn waiter_backend(cluster: &EtcdCluster) -> EtcdBackend {
    EtcdBackend::connect(config_for(cluster.endpoints()).with_default_ttl(TTL))
        .await
        .expect("connect to the test etcd")
}

/// Txn and Range requests member 0 has started so far.
async fn requests(cluster: &EtcdCluster) -> f64 {
    let member = cluster.member(0);
    let mut sum = 0.0;
    for method in [r#"grpc_method="Txn""#, r#"grpc_method="Range""#] {
        sum += member
            .metric("grpc_server_started_total", &[method])
            .await
            .expect("read etcd metrics");
    }
    sum
}

#[tokio::test]
async fn a_lock_hand_off_costs_the_release_and_one_confirming_read() {
    let cluster = start_cluster(1).await;
    let name = "handoff-reads";
    let mut raw = raw_client(&cluster).await;
    let mut puts = watch_queue(&mut raw, &format!("{}/lock/{name}/", support::PREFIX)).await;
    let holder = waiter_backend(&cluster)
        .await
        .try_lock(name)
        .await
        .expect("A");
    next_put_key(&mut puts).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = waiter_backend(&cluster).await;
        waiters.push(tokio::spawn(async move {
            client.lock(name).await.expect("a turn")
        }));
        next_put_key(&mut puts).await;
    }
    tokio::time::sleep(YOUNG_VIEW).await;

    let mut releasing = holder;
    for (turn, waiter) in waiters.into_iter().enumerate() {
        let before = requests(&cluster).await;
        releasing.release().await.expect("release");
        let next = joined(SLACK, &format!("waiter {turn} after a release"), waiter).await;
        let spent = requests(&cluster).await - before;
        assert_eq!(
            spent, 2.0,
            "hand-off {turn}: the release's Txn and the confirming read of the waiter let in, \
             no read by the waiters still waiting"
        );
        releasing = next;
    }
    releasing.release().await.expect("release the last");
}

#[tokio::test]
async fn a_semaphore_departure_costs_the_release_and_one_confirming_read() {
    let cluster = start_cluster(1).await;
    let name = "shared-handoff-reads";
    let mut raw = raw_client(&cluster).await;
    let mut puts = watch_queue(&mut raw, &shared_queue("semaphore", name)).await;
    // A and B hold both permits; C, D and E wait.
    let a = waiter_backend(&cluster)
        .await
        .try_permit(name, 2)
        .await
        .expect("A");
    next_put_key(&mut puts).await;
    let b = waiter_backend(&cluster)
        .await
        .try_permit(name, 2)
        .await
        .expect("B");
    next_put_key(&mut puts).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = waiter_backend(&cluster).await;
        waiters.push(tokio::spawn(async move {
            client.permit(name, 2).await.expect("a permit")
        }));
        next_put_key(&mut puts).await;
    }
    tokio::time::sleep(YOUNG_VIEW).await;

    // Each departure lets exactly the next waiter in, FIFO.
    let mut holders = std::collections::VecDeque::from([a, b]);
    for (turn, waiter) in waiters.into_iter().enumerate() {
        let before = requests(&cluster).await;
        let leaving = holders.pop_front().expect("a holder");
        leaving.release().await.expect("release");
        let next = joined(SLACK, &format!("waiter {turn} after a departure"), waiter).await;
        let spent = requests(&cluster).await - before;
        assert_eq!(
            spent, 2.0,
            "departure {turn}: the release's Txn and the confirming read of the waiter let in, \
             no read by the waiters still waiting"
        );
        holders.push_back(next);
    }
    for holder in holders {
        holder.release().await.expect("release");
    }
}
