//! The linearizable read that confirms a waiter's turn: a turn seen on a
//! member that lags is taken only once the cluster agrees.
//!
//! Waiter W reaches etcd only through member C, behind a proxy that can
//! pause W's connection (hold its bytes, keep it open). P holds the lock,
//! W waits, Q waits behind W, P and Q on the leader. With W paused, P
//! releases; once C has applied (and sent W) that release, C is cut off
//! from its peers, and W's lease is revoked on the majority: Q's
//! predecessor is gone, so Q holds. Then W's connection resumes: W hears
//! the release from C and sees its turn. C, cut off, still shows W's key
//! and nothing ahead of it, and keeps answering its clients as before (its
//! election timeout is long, so it does not yet know that it lost its
//! leader). Only a linearizable read, which C cannot answer without its
//! leader, keeps W from holding the lock next to Q.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_etcd::{ClientConfig, EtcdBackend, lease_of_key};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{EtcdCluster, EtcdOptions};
use etcd_client::{EventType, WatchStream};
use tokio::time::timeout;

/// The members' election timeout: how long C, cut off, goes on believing
/// in its leader and answering its clients. Everything from the cut to
/// W's confirmation takes far less.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(4);
/// Bound for anything a healthy cluster does at once.
const SLACK: Duration = Duration::from_secs(5);
/// How long W, resumed, is given to report the lock held: a member-local
/// confirmation answers within milliseconds; well inside C's election
/// timeout, so C still answers as if it had a leader.
const TURN_WINDOW: Duration = Duration::from_millis(1500);
/// The lock's TTL: W's lease must outlive the pause on its own.
const TTL: Duration = Duration::from_secs(10);

/// A backend with a long TTL and a short request timeout on `endpoint`.
async fn backend_on(endpoint: String) -> EtcdBackend {
    let config = support::config_for(vec![endpoint])
        .with_default_ttl(TTL)
        .with_request_timeout(Duration::from_millis(500));
    EtcdBackend::connect(config).await.expect("connect")
}

/// How many range reads member `index` has answered.
async fn ranges_served(cluster: &EtcdCluster, index: usize) -> f64 {
    cluster
        .member(index)
        .metric("grpc_server_handled_total", &[r#"grpc_method="Range""#])
        .await
        .expect("read the member's metrics")
}

/// Waits until `events` reports the delete of `key`.
async fn until_deleted(events: &mut WatchStream, key: &str) {
    loop {
        let message = events.message().await.expect("watch").expect("watch open");
        let deleted = message.events().iter().any(|e| {
            e.event_type() == EventType::Delete
                && e.kv().is_some_and(|kv| kv.key_str().ok() == Some(key))
        });
        if deleted {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_seen_on_a_cut_off_member_is_not_taken_while_another_waiter_holds() {
    let options = EtcdOptions::new(3)
        .isolatable()
        .election_timeout(ELECTION_TIMEOUT);
    let cluster = match EtcdCluster::start_with(options).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start an isolatable 3-member etcd: {e}"),
    };
    let (leader, cut) = support::leader_and_follower(&cluster, ELECTION_TIMEOUT * 3).await;
    let upstream: SocketAddr = cluster.member(cut).endpoint().parse().unwrap();
    let link = FaultProxy::start(upstream).await.expect("proxy");
    let w = backend_on(link.addr().to_string()).await;
    let p = backend_on(cluster.member(leader).endpoint()).await;
    let q = backend_on(cluster.member(leader).endpoint()).await;

    let name = "confirm/turn";
    let held = p.lock(name).await.expect("P locks");
    let queue = support::queue_of(held.key());
    let mut on_leader = support::client_of(&cluster, leader).await;
    let mut joins = support::watch_queue(&mut on_leader, &queue).await;
    let mut on_cut = support::client_of(&cluster, cut).await;
    let mut cut_events = support::watch_queue(&mut on_cut, &queue).await;

    let reads_on_cut = || ranges_served(&cluster, cut);
    let reads_before = reads_on_cut().await;
    let mut w_waits = tokio::spawn(async move { w.lock(name).await });
    let w_key = timeout(SLACK, support::next_put_key(&mut joins))
        .await
        .expect("W joins the queue");
    // W's queue view is open and current: it read the queue on C (W's
    // only range read) after its watch was created there. Pausing W
    // before that would leave W with no view to hear the release on.
    let view_read = timeout(SLACK, async {
        while reads_on_cut().await == reads_before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(view_read.is_ok(), "W's queue view never read the queue");
    let q_waits = tokio::spawn(async move { q.lock(name).await });
    timeout(SLACK, support::next_put_key(&mut joins))
        .await
        .expect("Q joins the queue behind W");

    link.blackhole();
    let held_key = held.key().to_owned();
    held.release().await.expect("P releases");
    // C has applied the release and sent it to its watchers, W's among
    // them (held in the paused link).
    timeout(SLACK, until_deleted(&mut cut_events, &held_key))
        .await
        .expect("C applies P's release");
    cluster.isolate(cut);
    let w_lease = lease_of_key(&w_key).expect("W's key names its lease");
    on_leader
        .lease_revoke(w_lease)
        .await
        .expect("revoke W's lease on the majority");
    let q_holds = timeout(SLACK, q_waits)
        .await
        .expect("Q holds once W's entry is gone")
        .expect("Q's task")
        .expect("Q locks");

    link.restore();
    // W hears the release from C and sees its turn.
    if let Ok(ended) = timeout(TURN_WINDOW, &mut w_waits).await {
        match ended.expect("W's task") {
            Ok(guard) => panic!(
                "two holders: W reports {name} held (token {}) while Q holds it (token {}); W \
                 confirmed its turn on member {cut}, cut off from its peers, which still showed \
                 W's key: a member-local read, not a linearizable one",
                guard.token(),
                q_holds.token()
            ),
            Err(e) => eprintln!("W's acquire ended while C was cut off: {e}"),
        }
    }
    assert!(q_holds.is_held(), "Q lost the lock: {:?}", q_holds.health());

    // Back with its peers, C learns that W's entry is gone, and so does W.
    cluster.rejoin(cut);
    if !w_waits.is_finished() {
        let ended = timeout(SLACK + TTL, &mut w_waits)
            .await
            .expect("W's acquire ends once C rejoins")
            .expect("W's task");
        match ended {
            Ok(guard) => panic!(
                "W reports {name} held (token {}) while Q holds it (token {})",
                guard.token(),
                q_holds.token()
            ),
            Err(e) => eprintln!("W's acquire ended after C rejoined: {e}"),
        }
    }
    assert!(q_holds.is_held(), "Q lost the lock: {:?}", q_holds.health());
    q_holds.release().await.expect("Q releases");
}
