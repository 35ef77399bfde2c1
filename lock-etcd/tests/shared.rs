//! Semaphores and read-write locks on a real etcd: the limit under
//! contention, writer preference, and tries that leave nothing behind.
//! (Waiters woken only by the entries they wait for: `wakeups.rs`.)

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt, LockGuard};
use distlock_testkit::assert::{fails_with, joined, within};
use etcd_client::GetOptions;
use support::{
    backend, next_put_key, raw_client, shared_queue as queue, start_cluster, watch_queue,
};
use tokio::sync::watch;

const SLACK: Duration = Duration::from_secs(10);
const LIMIT: u32 = 3;
const CLIENTS: usize = 6;
const ROUNDS: usize = 6;

/// How many keys the queue `queue` holds now.
async fn keys_in(raw: &mut etcd_client::Client, queue: &str) -> i64 {
    let options = GetOptions::new().with_prefix().with_count_only();
    raw.get(queue, Some(options)).await.expect("count").count()
}

#[tokio::test]
async fn six_clients_never_hold_more_than_three_permits_and_fill_all_three() {
    let cluster = start_cluster(1).await;
    let name = "shared-contention";
    let inside = Arc::new(AtomicUsize::new(0));
    // The most holders seen inside at once, published to the first round's
    // holders, which each stay until all three permits are in use.
    let (most, _) = watch::channel(0usize);
    let most = Arc::new(most);
    let grants = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = backend(&cluster).await;
        let (inside, most, grants) = (inside.clone(), most.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let guard = client.permit(name, LIMIT).await.expect("a permit");
                // Not atomic on purpose: a read, a pause, a write. Only the
                // limit of holders keeps the count exact.
                let now = inside.load(Ordering::SeqCst) + 1;
                inside.fetch_add(1, Ordering::SeqCst);
                assert!(now <= LIMIT as usize, "{now} holders of {LIMIT} permits");
                most.send_modify(|most| *most = (*most).max(inside.load(Ordering::SeqCst)));
                if round == 0 {
                    let mut full = most.subscribe();
                    within(SLACK, "all three permits in use", async {
                        full.wait_for(|most| *most >= LIMIT as usize).await.unwrap();
                    })
                    .await;
                } else {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                grants.fetch_add(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        joined(Duration::from_secs(120), "a contending client", task).await;
    }
    assert_eq!(grants.load(Ordering::SeqCst), CLIENTS * ROUNDS);
    assert_eq!(*most.borrow(), LIMIT as usize);
    let mut raw = raw_client(&cluster).await;
    assert_eq!(keys_in(&mut raw, &queue("semaphore", name)).await, 0);
}

#[tokio::test]
async fn a_queued_writer_goes_before_a_later_reader() {
    let cluster = start_cluster(1).await;
    let name = "shared-writer-first";
    let mut raw = raw_client(&cluster).await;
    let mut puts = watch_queue(&mut raw, &queue("rwlock", name)).await;
    let first_reader = backend(&cluster).await;
    let reader = first_reader.read_lock(name).await.expect("read");
    next_put_key(&mut puts).await;

    let order = Arc::new(Mutex::new(Vec::new()));
    let writer_inside = Arc::new(AtomicUsize::new(0));
    let (release_writer, mut writer_may_go) = watch::channel(false);
    let (writer_in, writer_granted) = tokio::sync::oneshot::channel();
    let writer = {
        let (client, order, inside) = (
            backend(&cluster).await,
            order.clone(),
            writer_inside.clone(),
        );
        tokio::spawn(async move {
            let guard = client.write_lock(name).await.expect("write");
            inside.store(1, Ordering::SeqCst);
            order.lock().unwrap().push(("write", guard.token()));
            writer_in.send(()).unwrap();
            writer_may_go.wait_for(|go| *go).await.unwrap();
            inside.store(0, Ordering::SeqCst);
            guard.release().await.expect("release the writer");
        })
    };
    next_put_key(&mut puts).await;
    let late_reader = {
        let (client, order, inside) = (
            backend(&cluster).await,
            order.clone(),
            writer_inside.clone(),
        );
        tokio::spawn(async move {
            let guard = client.read_lock(name).await.expect("late read");
            assert_eq!(
                inside.load(Ordering::SeqCst),
                0,
                "a reader inside with the writer"
            );
            order.lock().unwrap().push(("read", guard.token()));
            guard
        })
    };
    next_put_key(&mut puts).await;
    // Readers may share with a holding reader, but not jump a waiting writer.
    let other = backend(&cluster).await;
    fails_with(
        ErrorKind::WouldBlock,
        "a read behind a waiting writer",
        other.try_read_lock(name).await,
    );
    assert!(
        order.lock().unwrap().is_empty(),
        "nobody but the first reader is in"
    );

    reader.release().await.expect("release the first reader");
    within(SLACK, "the writer gets in", writer_granted)
        .await
        .unwrap();
    assert_eq!(
        order.lock().unwrap().len(),
        1,
        "the late reader went in with the writer"
    );
    release_writer.send(true).unwrap();
    joined(SLACK, "the writer", writer).await;
    let late: LockGuard = joined(SLACK, "the late reader", late_reader).await;
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(who, _)| *who).collect::<Vec<_>>(),
        ["write", "read"]
    );
    assert!(
        order[0].1 < order[1].1,
        "tokens follow the grants: {order:?}"
    );
    late.release().await.expect("release the late reader");
}

#[tokio::test]
async fn a_try_that_would_block_leaves_no_key_behind() {
    let cluster = start_cluster(1).await;
    let (a, b) = (backend(&cluster).await, backend(&cluster).await);
    let mut raw = raw_client(&cluster).await;
    let held = a.try_permit("shared-try", 1).await.expect("the one permit");
    fails_with(
        ErrorKind::WouldBlock,
        "a second permit",
        b.try_permit("shared-try", 1).await,
    );
    // A semaphore with room lets a try in behind its holders.
    let more = b
        .try_permit("shared-try-room", 2)
        .await
        .expect("first of two");
    let second = a
        .try_permit("shared-try-room", 2)
        .await
        .expect("second of two");
    assert!(second.token() > more.token());
    fails_with(
        ErrorKind::WouldBlock,
        "a third of two",
        b.try_permit("shared-try-room", 2).await,
    );
    let writer = a
        .try_write_lock("shared-try")
        .await
        .expect("the rwlock is apart");
    fails_with(
        ErrorKind::WouldBlock,
        "a read beside the writer",
        b.try_read_lock("shared-try").await,
    );
    assert_eq!(
        keys_in(&mut raw, &queue("semaphore", "shared-try")).await,
        1
    );
    assert_eq!(
        keys_in(&mut raw, &queue("semaphore", "shared-try-room")).await,
        2
    );
    assert_eq!(keys_in(&mut raw, &queue("rwlock", "shared-try")).await, 1);
    // Different limits for one semaphore are refused, naming both.
    let err = fails_with(
        ErrorKind::InvalidConfig,
        "another limit",
        b.try_permit("shared-try-room", 5).await,
    );
    assert!(
        err.to_string().contains("limit of 2") && err.to_string().contains("not 5"),
        "{err}"
    );
    for guard in [held, more, second, writer] {
        guard.release().await.expect("release");
    }
}
