//! A member cut off from its peers while its clients still reach it: what
//! it serves meanwhile, and a waiter connected only to it.

mod support;

use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_etcd::EtcdBackend;
use distlock_testkit::servers::{EtcdCluster, EtcdOptions};
use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::time::timeout;

/// Bound for anything a healthy cluster does at once (an election, a
/// member catching up, a hand-off).
const SLACK: Duration = Duration::from_secs(3);
/// Poll period of bounded waits on observable conditions.
const POLL: Duration = Duration::from_millis(10);

async fn start_isolatable() -> EtcdCluster {
    match EtcdCluster::start_with(EtcdOptions::new(3).isolatable()).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start an isolatable 3-member etcd: {e}"),
    }
}

/// `key`'s value in a serializable read, and the read's revision.
async fn local_read(client: &mut Client, key: &str) -> (Option<Vec<u8>>, i64) {
    let resp = client
        .get(key, Some(GetOptions::new().with_serializable()))
        .await
        .expect("serializable read");
    let rev = resp.header().expect("header").revision();
    (resp.kvs().first().map(|kv| kv.value().to_vec()), rev)
}

/// Polls serializable reads of `key` until they show `value`.
async fn until_local_value(client: &mut Client, key: &str, value: &[u8], what: &str) {
    let shown = timeout(SLACK, async {
        while local_read(client, key).await.0.as_deref() != Some(value) {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    assert!(
        shown.is_ok(),
        "{what}: {key} is not {value:?} within {SLACK:?}"
    );
}

/// Waits until member `index` refuses clients that require a leader: it
/// has noticed that it is cut off.
async fn until_leaderless(cluster: &EtcdCluster, index: usize) {
    let mut client = Client::connect(
        [cluster.member(index).endpoint()],
        Some(ConnectOptions::new().with_require_leader(true)),
    )
    .await
    .expect("raw etcd client");
    let refused = timeout(SLACK, async {
        loop {
            match client
                .get("/", Some(GetOptions::new().with_serializable()))
                .await
            {
                Err(e) => return e,
                Ok(_) => tokio::time::sleep(POLL).await,
            }
        }
    })
    .await
    .expect("an isolated member refuses clients that require a leader once it notices");
    assert!(refused.to_string().contains("no leader"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_member_serves_stale_local_reads_and_catches_up_on_rejoin() {
    let cluster = start_isolatable().await;
    let (leader, lagging) = support::leader_and_follower(&cluster, SLACK).await;
    let mut majority = support::client_of(&cluster, leader).await;
    let mut cut_off = support::client_of(&cluster, lagging).await;
    let key = "/isolation/probe";

    majority.put(key, "before", None).await.expect("put");
    until_local_value(&mut cut_off, key, b"before", "before the cut").await;

    cluster.isolate(lagging);
    let put = timeout(SLACK, majority.put(key, "during", None))
        .await
        .expect("the two connected members still commit")
        .expect("put");
    let committed_at = put.header().expect("header").revision();

    // Its clients still reach it, and it answers from what it had applied.
    let (value, rev) = local_read(&mut cut_off, key).await;
    assert_eq!(value.as_deref(), Some(&b"before"[..]));
    assert!(rev < committed_at, "read at {rev}, write at {committed_at}");
    // What needs the leader gets no answer.
    let linearizable = timeout(Duration::from_millis(500), cut_off.get(key, None)).await;
    assert!(
        !matches!(&linearizable, Ok(Ok(_))),
        "a linearizable read on the isolated member answered: {linearizable:?}"
    );
    until_leaderless(&cluster, lagging).await;
    let (value, _) = local_read(&mut cut_off, key).await;
    assert_eq!(value.as_deref(), Some(&b"before"[..]));

    cluster.rejoin(lagging);
    until_local_value(&mut cut_off, key, b"during", "after the rejoin").await;
    // Reads that waited for a leader may end with "leader changed" when
    // it is found; the ones after that are answered.
    let read = timeout(SLACK, async {
        loop {
            match cut_off.get(key, None).await {
                Ok(read) => return read,
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    })
    .await
    .expect("linearizable reads are answered again");
    assert_eq!(read.kvs()[0].value(), b"during");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_on_an_isolated_member_takes_the_lock_after_it_rejoins() {
    // Longer than the cut: the waiter's keepalives go through the member.
    let ttl = Duration::from_secs(4);
    let cluster = start_isolatable().await;
    let (leader, lagging) = support::leader_and_follower(&cluster, SLACK).await;
    let connect = |index: usize| {
        let config =
            support::config_for(vec![cluster.member(index).endpoint()]).with_default_ttl(ttl);
        async move { EtcdBackend::connect(config).await.expect("connect") }
    };
    let holder = connect(leader).await;
    let waiter = connect(lagging).await;
    let held = holder.lock("isolation/lock").await.expect("lock");
    let queue = support::queue_of(held.key());

    let mut raw = support::client_of(&cluster, leader).await;
    let mut events = support::watch_queue(&mut raw, &queue).await;
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock("isolation/lock").await;
        (guard, waiter)
    });
    let joined = timeout(SLACK, events.message())
        .await
        .expect("the waiter joins the queue")
        .expect("watch event")
        .expect("watch open");
    let waiter_key = joined.events()[0]
        .kv()
        .expect("kv")
        .key_str()
        .unwrap()
        .to_owned();
    // Its member has applied the join (and so answered it) before the cut.
    let mut cut_off = support::client_of(&cluster, lagging).await;
    let applied = timeout(SLACK, async {
        while local_read(&mut cut_off, &waiter_key).await.0.is_none() {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    assert!(applied.is_ok(), "the waiter's member never shows its key");

    cluster.isolate(lagging);
    let token = held.token();
    let held_key = held.key().to_owned();
    held.release().await.expect("release");
    // The member cannot learn of the release: its raft traffic is dropped.
    until_leaderless(&cluster, lagging).await;
    let (holder_key, _) = local_read(&mut cut_off, held_key.as_str()).await;
    assert!(holder_key.is_some(), "the isolated member saw the release");
    assert!(
        !waiting.is_finished(),
        "the waiter took the lock while its member could not know it was free"
    );

    cluster.rejoin(lagging);
    let (guard, _waiter) = timeout(SLACK, waiting)
        .await
        .expect("the waiter takes the lock soon after its member rejoins")
        .unwrap();
    let guard = guard.expect("lock");
    assert!(guard.token() > token);
    guard.release().await.expect("release");
}
