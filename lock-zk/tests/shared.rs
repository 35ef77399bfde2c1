//! Semaphores and read-write locks on a real standalone ZooKeeper: the
//! limit under contention, writer preference as the nodes show it, and a
//! client whose session dies in the middle of an acquire.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    Access, AcquireOptions, ErrorKind, LockBackend, LockBackendExt, LockName, Wait,
};
use distlock_testkit::assert::{fails_within, within};
use tokio::sync::watch;

use support::{Standalone, connect, proxied, standalone, until_children, until_watches};

const SESSION: Duration = Duration::from_secs(2);
const LIMIT: u32 = 3;
/// Bound on any one wait that should end quickly.
const BOUND: Duration = Duration::from_secs(20);

fn waiting() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::Timeout(BOUND))
}

fn now() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::No)
}

fn name(name: &str) -> LockName {
    LockName::new(name).expect("a valid name")
}

/// Six clients take permits of a 3-permit semaphore over and over. Each
/// holder stays until three are inside (or briefly, if the others are
/// between rounds): never more than three are inside at once, all three
/// permits are in use together, and every grant has a new, higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_clients_never_hold_more_than_three_permits_and_use_all_three() {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 5;
    let Standalone { addrs, admin, .. } = &standalone().await;
    let semaphore = name("contention");
    let (inside, _) = watch::channel(0usize);
    let inside = Arc::new(inside);
    let most = Arc::new(Mutex::new(0usize));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let access = Access::permit(LIMIT).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = connect(addrs, "/shared", SESSION).await;
        let (inside, most, tokens, semaphore) = (
            inside.clone(),
            most.clone(),
            tokens.clone(),
            semaphore.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = within(BOUND, "a permit", async {
                    client.acquire_as(&semaphore, access, &waiting()).await
                })
                .await
                .expect("a permit");
                let mut entered = 0;
                inside.send_modify(|n| {
                    *n += 1;
                    entered = *n;
                });
                {
                    let mut most = most.lock().unwrap();
                    *most = (*most).max(entered);
                }
                assert!(
                    entered <= LIMIT as usize,
                    "{entered} holders of {LIMIT} permits"
                );
                tokens.lock().unwrap().push(guard.token());
                let mut full = inside.subscribe();
                let _ = tokio::time::timeout(
                    Duration::from_millis(200),
                    full.wait_for(|n| *n >= LIMIT as usize),
                )
                .await;
                inside.send_modify(|n| *n -= 1);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        within(BOUND * 3, "a contender's rounds", task)
            .await
            .expect("a contender panicked");
    }
    assert_eq!(
        *most.lock().unwrap(),
        LIMIT as usize,
        "all permits in use at once"
    );
    let mut tokens = tokens.lock().unwrap().clone();
    let grants = tokens.len();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), grants, "every grant has its own token");
    assert_eq!(grants, CLIENTS * ROUNDS);
    // Every node is gone after the last release.
    until_children(admin, "/shared/semaphores/contention", 0, BOUND).await;
}

/// A reader holds; a writer queues; a reader arriving after the writer
/// waits for it (its `try` fails and leaves no node behind), and gets in
/// only after the writer, with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_writer_goes_before_a_later_reader() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let rwlock = name("orders");
    let dir = "/shared/rwlocks/orders";
    let first = connect(addrs, "/shared", SESSION).await;
    let writer = connect(addrs, "/shared", SESSION).await;
    let late = connect(addrs, "/shared", SESSION).await;
    let reading = first
        .acquire_as(&rwlock, Access::Read, &now())
        .await
        .expect("the lock is free");
    let queued = {
        let (writer, rwlock) = (writer.clone(), rwlock.clone());
        tokio::spawn(async move { writer.acquire_as(&rwlock, Access::Write, &waiting()).await })
    };
    let nodes = until_children(admin, dir, 2, BOUND).await;
    assert!(
        nodes.iter().any(|n| n.contains("-read-")) && nodes.iter().any(|n| n.contains("-write-")),
        "{nodes:?}"
    );
    fails_within(
        BOUND,
        ErrorKind::WouldBlock,
        "a reader behind a queued writer",
        late.acquire_as(&rwlock, Access::Read, &now()),
    )
    .await;
    until_children(admin, dir, 2, BOUND).await;
    let waiting_reader = {
        let (late, rwlock) = (late.clone(), rwlock.clone());
        tokio::spawn(async move { late.acquire_as(&rwlock, Access::Read, &waiting()).await })
    };
    until_children(admin, dir, 3, BOUND).await;
    reading.release().await.expect("release");
    let writing = within(BOUND, "the writer after the first reader", queued)
        .await
        .expect("join")
        .expect("the writer");
    assert!(
        !waiting_reader.is_finished(),
        "the later reader got in beside the writer"
    );
    let write_token = writing.token();
    writing.release().await.expect("release");
    let read = within(BOUND, "the later reader after the writer", waiting_reader)
        .await
        .expect("join")
        .expect("the later reader");
    assert!(read.token() > write_token, "tokens follow the grants");
    read.release().await.expect("release");
}

/// Three permits are held and a fourth client waits; its session then dies
/// (its connection goes silent) just as a holder leaves. Its node keeps its
/// place until the server expires the session: another client is refused
/// while it is there, and gets in once it is gone. The dead client never
/// gets a guard, and no more than three nodes are ever in the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_dying_mid_acquire_never_lets_the_semaphore_exceed_its_limit() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let semaphore = name("dying");
    let dir = "/shared/semaphores/dying";
    let access = Access::permit(LIMIT).unwrap();
    let mut holders = Vec::new();
    for _ in 0..LIMIT {
        let client = connect(addrs, "/shared", SESSION).await;
        let guard = client
            .acquire_as(&semaphore, access, &now())
            .await
            .expect("a free permit");
        holders.push((client, guard));
    }
    let dying = proxied(&addrs[0], "/shared", SESSION).await;
    let acquiring = {
        let (backend, semaphore) = (dying.backend.clone(), semaphore.clone());
        tokio::spawn(async move { backend.acquire_as(&semaphore, access, &waiting()).await })
    };
    until_children(admin, dir, LIMIT as usize + 1, BOUND).await;
    // The holders watch their own nodes, and the waiter the three ahead of it.
    until_watches(&addrs[0], 2 * LIMIT as usize, BOUND).await;
    dying.proxy.blackhole();
    let (_, released) = holders.pop().expect("a holder");
    released.release().await.expect("release");
    // Two holders and the dying client's node: the limit is reached.
    let other = connect(addrs, "/shared", SESSION).await;
    fails_within(
        BOUND,
        ErrorKind::WouldBlock,
        "a permit while the dying client's node holds the last place",
        other.acquire_as(&semaphore, access, &now()),
    )
    .await;
    let granted = within(
        SESSION + BOUND,
        "a permit once the dead session expired",
        other.acquire_as(&semaphore, access, &waiting()),
    )
    .await
    .expect("the permit freed by the expired session");
    let nodes = admin.list_children(dir).await.expect("list");
    assert_eq!(nodes.len(), LIMIT as usize, "{nodes:?}");
    let outcome = within(BOUND * 2, "the dead client's acquire ends", acquiring)
        .await
        .expect("join");
    assert!(
        outcome.is_err(),
        "a client whose session died got a guard: {outcome:?}"
    );
    granted.release().await.expect("release");
    for (_, guard) in holders {
        guard.release().await.expect("release");
    }
}

/// A semaphore, a read-write lock and a mutex of one name are independent,
/// and a permit whose limit disagrees with the holders' is refused naming
/// both limits, leaving no node behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spaces_are_apart_and_limits_must_agree() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let jobs = name("jobs");
    let client = connect(addrs, "/shared", SESSION).await;
    let lock = client.try_lock("jobs").await.expect("the mutex");
    let permit = client
        .acquire_as(&jobs, Access::permit(1).unwrap(), &now())
        .await
        .expect("the semaphore is apart from the mutex");
    let write = client
        .acquire_as(&jobs, Access::Write, &now())
        .await
        .expect("the read-write lock is apart from both");
    let other = connect(addrs, "/shared", SESSION).await;
    let err = fails_within(
        BOUND,
        ErrorKind::InvalidConfig,
        "a permit with another limit",
        other.acquire_as(&jobs, Access::permit(2).unwrap(), &waiting()),
    )
    .await;
    assert!(
        err.message().contains("limit of 1") && err.message().contains("not 2"),
        "{err}"
    );
    until_children(admin, "/shared/semaphores/jobs", 1, BOUND).await;
    for guard in [lock, permit, write] {
        guard.release().await.expect("release");
    }
}
