//! Fault tests on a real three-server ZooKeeper ensemble: a killed leader, a
//! client cut off past its session timeout, and a connection lost between a
//! `create` and its reply. One ensemble at a time (three JVMs each).

mod support;

use distlock_zk::ClientConfig;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use distlock_core::{LockBackendExt, LostReason};
use distlock_testkit::assert::joined;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{ZkEnsemble, ZkOptions};
use distlock_testkit::workload::{ClientFactory, Progress, WorkloadConfig, run_workload};
use distlock_zk::ZkBackend;
use futures::FutureExt;
use tokio::sync::{Mutex, MutexGuard};
use tokio::time::{Instant, timeout};

use support::{
    config, connect, leader, lock_and_release, proxied, raw_client, start_zk, wait_until,
};

/// Three-server ensembles are heavy for a two-core machine: run one at a time.
static ONE_ENSEMBLE: Mutex<()> = Mutex::const_new(());

/// Waits for the ensemble's turn, then starts the one `start` launches:
/// the turn (hold it to the end of the test), the ensemble and its addresses.
async fn one_ensemble(
    start: impl Future<Output = ZkEnsemble>,
) -> (MutexGuard<'static, ()>, ZkEnsemble, Vec<String>) {
    support::init_tracing();
    let one = ONE_ENSEMBLE.lock().await;
    let ensemble = start.await;
    let addrs = ensemble.addrs();
    (one, ensemble, addrs)
}

/// How long another client may take to get a lock whose holder's session
/// of `session` must expire first.
fn takeover(session: Duration) -> Duration {
    session * 3 + Duration::from_secs(5)
}

/// Three servers whose quorum links can be cut or slowed; a follower notices
/// a lost leader after `sync_limit` ticks.
async fn start_isolatable(sync_limit: u32) -> ZkEnsemble {
    ZkEnsemble::start_with(ZkOptions::new(3).sync_limit(sync_limit).isolatable())
        .await
        .unwrap_or_else(|e| panic!("cannot start ZooKeeper for the test: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_survives_leader_kill_with_increasing_tokens() {
    let (_one, ensemble, addrs) = one_ensemble(start_zk(3)).await;
    let factory: ClientFactory = {
        let addrs = addrs.clone();
        Arc::new(move || {
            let config = config(&addrs, "/leader-kill", Duration::from_secs(4));
            async move {
                let backend = ZkBackend::connect(config).await?;
                Ok(Arc::new(backend) as Arc<distlock_core::DynLockBackend>)
            }
            .boxed()
        })
    };
    let progress = Arc::new(Progress::default());
    let workload = WorkloadConfig {
        clients: 4,
        locks: 1,
        duration: Duration::from_secs(12),
        hold: Duration::from_millis(1),
        name_prefix: "leader-kill".into(),
        primitive: Default::default(),
        ..WorkloadConfig::default()
    };
    let run = tokio::spawn({
        let progress = progress.clone();
        async move { run_workload(&workload, factory, progress).await }
    });
    let count = || progress.acquisitions.load(Ordering::Relaxed);
    wait_until(
        Duration::from_secs(10),
        "progress before the kill",
        async || count() >= 50,
    )
    .await;
    let leader = leader(&ensemble).await;
    ensemble.member(leader).kill().await;
    let at_kill = count();
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensemble
        .member(leader)
        .restart()
        .await
        .expect("restart the old leader");
    let at_restart = count();
    wait_until(
        Duration::from_secs(20),
        "progress after recovery",
        async || count() >= at_restart + 50,
    )
    .await;
    let report = joined(Duration::from_secs(30), "workload ends", run)
        .await
        .expect("workload");
    eprintln!(
        "leader kill: {} acquisitions ({at_kill} before the kill, {at_restart} at restart), {} errors ({:?}), per client {:?}",
        report.acquisitions, report.errors, report.first_error, report.per_client
    );
    assert_eq!(report.violations, 0, "two holders at once: {report:?}");
    assert_eq!(report.token_regressions, 0, "tokens went back: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cut_off_holder_loses_lock_before_another_acquires() {
    let (_one, _ensemble, addrs) = one_ensemble(start_zk(3)).await;
    let session = Duration::from_secs(2);
    let cut = proxied(&addrs[0], "/cut-off", session).await;
    let other = connect(&addrs, "/cut-off", session).await;
    let held = cut.backend.lock("cut").await.expect("lock");
    let first_token = held.token();
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            let guard = other.lock("cut").await;
            (Instant::now(), guard)
        }
    });
    let cut_at = Instant::now();
    cut.proxy.blackhole();
    let reason = timeout(session + Duration::from_secs(3), held.lost())
        .await
        .expect("the cut-off holder's lost signal fires");
    let lost_at = Instant::now();
    assert_eq!(reason, LostReason::Disconnected);
    assert!(!held.is_held());
    let what = "another client acquires after the session expires";
    let (acquired_at, next) = joined(takeover(session), what, waiter).await;
    let next = next.expect("lock");
    eprintln!(
        "cut-off: lost after {:?}, taken over after {:?}",
        lost_at - cut_at,
        acquired_at - cut_at
    );
    assert!(
        lost_at < acquired_at,
        "the old holder still trusted its lock when the next one got it"
    );
    assert!(next.token() > first_token);
    let next_token = next.token();
    cut.proxy.restore();
    let err = held
        .release()
        .await
        .expect_err("releasing a lost lock reports it");
    assert!(
        matches!(
            err.kind(),
            distlock_core::ErrorKind::LeaseLost | distlock_core::ErrorKind::NotHeld
        ),
        "{err}"
    );
    next.release().await.expect("release");
    // The cut-off client recovers with a new session.
    let again = timeout(Duration::from_secs(20), cut.backend.lock("cut"))
        .await
        .expect("the cut-off client locks again")
        .expect("lock");
    assert!(again.token() > next_token);
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_loss_between_create_and_reply_leaves_no_orphan() {
    let (_one, _ensemble, addrs) = one_ensemble(start_zk(3)).await;
    let admin = raw_client(&addrs, None).await;
    // Long session: pings must survive the proxy's added latency.
    let client = proxied(&addrs[0], "/orphan", Duration::from_secs(6)).await;
    let dir = "/orphan/locks/create-loss";
    lock_and_release(
        &client.backend,
        "create-loss",
        "first lock creates the directory",
    )
    .await;
    let children = async || admin.list_children(dir).await.expect("list");
    assert!(children().await.is_empty());

    let delay = Duration::from_millis(400);
    client.proxy.delay(delay);
    let acquiring = tokio::spawn({
        let backend = client.backend.clone();
        async move {
            backend
                .lock_timeout("create-loss", Duration::from_secs(30))
                .await
        }
    });
    // The create has reached the server once its node exists; its reply is
    // still held in the proxy, and the cut drops it.
    wait_until(delay * 4, "the create reaches the server", async || {
        !children().await.is_empty()
    })
    .await;
    client.proxy.cut();
    let sent_node = children().await;
    assert_eq!(sent_node.len(), 1);
    client.proxy.delay(Duration::ZERO);
    client.proxy.restore();
    let guard = joined(
        Duration::from_secs(20),
        "the acquisition completes after the connection returns",
        acquiring,
    )
    .await
    .expect("lock");
    let after = children().await;
    assert_eq!(
        after, sent_node,
        "a retried create left another node behind"
    );
    assert_eq!(guard.key(), format!("{dir}/{}", after[0]));
    guard.release().await.expect("release");
    assert!(children().await.is_empty(), "a node is left after release");
    let other = connect(&addrs, "/orphan", Duration::from_secs(2)).await;
    lock_and_release(&other, "create-loss", "nothing blocks the lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_cut_off_from_the_leader_stops_vouching_before_another_acquires() {
    // The follower notices the lost leader only after 3 s, longer than the
    // session timeout: until then it answers its clients' pings.
    let (_one, ensemble, addrs) = one_ensemble(start_isolatable(30)).await;
    let leader = leader(&ensemble).await;
    let follower = (leader + 1) % addrs.len();
    let majority: Vec<String> = (0..addrs.len())
        .filter(|i| *i != follower)
        .map(|i| addrs[i].clone())
        .collect();
    let session = Duration::from_secs(2);
    let a = ZkBackend::connect(config(&addrs[follower..=follower], "/isolated", session))
        .await
        .expect("connect to the follower");
    let b = ZkBackend::connect(config(&majority, "/isolated", session))
        .await
        .expect("connect to the majority");
    let held = Arc::new(a.lock("split").await.expect("lock"));
    let waiter = tokio::spawn({
        let held = held.clone();
        async move {
            let guard = b.lock("split").await;
            (
                held.is_held(),
                held.lost_signal().reason(),
                Instant::now(),
                guard,
            )
        }
    });
    let cut_at = Instant::now();
    ensemble.isolate(follower);
    let what = "the majority side acquires once the session expires";
    let (a_held, a_reason, acquired_at, next) = joined(takeover(session), what, waiter).await;
    let next = next.expect("lock");
    eprintln!(
        "isolated follower: taken over after {:?}, old holder held {a_held}, lost {a_reason:?}",
        acquired_at - cut_at
    );
    assert!(
        !a_held,
        "the client on the cut-off follower still held the lock when the majority side got it"
    );
    assert!(a_reason.is_some(), "its lost signal had not fired");
    assert!(next.token() > held.token());
    ensemble.rejoin(follower);
    next.release().await.expect("release");
}

/// `zk_proposal_count` from the `mntr` output of the server at `addr`: how
/// many proposals it made as leader.
async fn proposals(addr: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("mntr");
    stream.write_all(b"mntr").await.expect("mntr");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("mntr");
    out.lines()
        .find_map(|line| line.strip_prefix("zk_proposal_count\t"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_proposal_count in mntr: {out}"))
}

/// A `create` whose reply is lost is looked up on a member that had not yet
/// applied it: the lookup must `sync` first, or it finds nothing and
/// creates a second node.
///
/// Every quorum link to the leader is slowed by `LAG` each way, so a
/// proposal reaches the followers `LAG` after the leader made it, and
/// commits `2 × LAG` after. The client's connection to the leader is cut
/// as soon as its `create` is proposed, and it reconnects to follower B.
/// B revalidates the session with the leader, and that answer reaches B
/// behind the proposal but ahead of its commit, so for about `LAG` after
/// the client is back B does not show the node. Only a `sync`, answered
/// behind the commit, brings B up to date. A second create shows as a
/// second node carrying our GUID, or, once that is deleted, in the
/// directory's `cversion`: one more create and one delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_create_is_looked_up_on_a_lagging_member_only_after_a_sync() {
    const LAG: Duration = Duration::from_millis(1000);
    let (_one, ensemble, addrs) = one_ensemble(start_isolatable(80)).await;
    let leader = leader(&ensemble).await;
    let (b, c) = ((leader + 1) % 3, (leader + 2) % 3);
    let admin = raw_client(&addrs[leader..=leader], None).await;
    let dir = "/lagging/locks/in-doubt";
    let first = connect(&addrs[leader..=leader], "/lagging", Duration::from_secs(2)).await;
    lock_and_release(&first, "in-doubt", "the first lock creates the directory").await;
    let cversion = async || {
        admin
            .check_stat(dir)
            .await
            .expect("stat")
            .expect("the directory exists")
            .cversion
    };
    let before = cversion().await;

    let to_leader = FaultProxy::start(addrs[leader].parse().unwrap())
        .await
        .expect("proxy");
    let to_b = FaultProxy::start(addrs[b].parse().unwrap())
        .await
        .expect("proxy");
    // The client starts on the leader: B is out of reach until the fault.
    to_b.cut();
    let servers = [to_leader.addr().to_string(), to_b.addr().to_string()];
    // The session's own sync loop first syncs a sixteenth of the session
    // timeout (3.75 s) after it opens: long after the lookup (about
    // `2 × LAG` after it opens), so that no sync of the loop, queued while
    // the client reconnects, brings B up to date in the lookup's stead.
    let client = ZkBackend::connect(
        config(&servers, "/lagging", Duration::from_secs(60))
            .with_request_timeout(Duration::from_secs(10)),
    )
    .await
    .expect("connect through the proxy to the leader");

    for follower in [b, c] {
        ensemble.quorum_link(follower, leader).delay(LAG);
    }
    let proposed = proposals(&addrs[leader]).await;
    let acquiring = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock_timeout("in-doubt", Duration::from_secs(30))
                .await
        }
    });
    wait_until(LAG, "the create is proposed", async || {
        proposals(&addrs[leader]).await > proposed
    })
    .await;
    // Its reply comes only with the commit, `2 × LAG` from now.
    to_leader.cut();
    to_b.restore();
    let guard = joined(
        Duration::from_secs(30),
        "the acquisition completes",
        acquiring,
    )
    .await
    .expect("lock");
    for follower in [b, c] {
        ensemble.quorum_link(follower, leader).delay(Duration::ZERO);
    }
    assert_eq!(to_b.connections(), 1, "the client did not move to B");
    let children = admin.list_children(dir).await.expect("list");
    assert_eq!(
        children.len(),
        1,
        "a second node carries our GUID: the lookup missed the first node: {children:?}"
    );
    assert_eq!(guard.key(), format!("{dir}/{}", children[0]));
    let after = cversion().await;
    assert_eq!(
        after - before,
        1,
        "the directory saw {} changes for one create: the lookup missed the first node \
         and created another",
        after - before
    );
    guard.release().await.expect("release");
}
