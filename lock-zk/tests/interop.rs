//! `layout=curator` against a real Apache Curator client (Curator 5.4 from
//! Debian's jars, see `curator/CuratorPeer.java`) on a real ZooKeeper:
//! `InterProcessMutex` and distlock exclude each other both ways, and
//! `LeaderLatch` and distlock elections agree on the leader.

mod curator;
mod support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, Candidacy, ElectionBackend, ErrorKind, LockBackend, LockBackendExt, LockName,
    Wait,
};
use distlock_testkit::servers::ZkEnsemble;
use distlock_zk::{NodeLayout, ZkBackend, ZkConfig, zk};

use curator::CuratorPeer;
use distlock_testkit::assert::{fails_with, joined, leader_of, next_ok, spawn_acquire};
use support::{Standalone, config, standalone, until_children};

const SESSION: Duration = Duration::from_secs(4);
/// How long any expected event may take.
const EVENT: Duration = Duration::from_secs(10);

async fn curator_backend(servers: &[String]) -> ZkBackend {
    let config = config(servers, "/distlock", SESSION).with_layout(NodeLayout::Curator);
    ZkBackend::connect(config)
        .await
        .expect("connect with layout=curator")
}

/// What every interop test stands on: one server, an admin acting from
/// outside, distlock in the Curator layout and a Curator peer.
struct Interop {
    /// Runs as long as the test holds this.
    _server: ZkEnsemble,
    addrs: Vec<String>,
    admin: zk::Client,
    distlock: ZkBackend,
    peer: CuratorPeer,
}

impl Interop {
    async fn start() -> Self {
        let Standalone {
            server,
            addrs,
            admin,
        } = standalone().await;
        let connect = server.connect_string();
        let (distlock, peer) = tokio::join!(curator_backend(&addrs), CuratorPeer::start(&connect));
        Interop {
            _server: server,
            addrs,
            admin,
            distlock,
            peer,
        }
    }
}

/// Asserts that `node` is a protected node of `dir` as Curator names them:
/// `{dir}/_c_{uuid}-{marker}{10 digits}`.
fn assert_curator_node(node: &str, dir: &str, marker: &str) {
    let name = node
        .strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix("/_c_"))
        .unwrap_or_else(|| panic!("{node} is not a protected node in {dir}"));
    let (uuid, rest) = name.split_at(36);
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{node}: {uuid}");
    let digits = rest
        .strip_prefix('-')
        .and_then(|rest| rest.strip_prefix(marker))
        .unwrap_or_else(|| panic!("{node} has no -{marker} after the GUID"));
    assert!(
        digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()),
        "{node}: sequence {digits:?}"
    );
}

/// The node's creation zxid: what distlock reports as the token.
async fn czxid(admin: &zk::Client, path: &str) -> u64 {
    let (_, stat) = admin.get_data(path).await.expect("read the node");
    u64::try_from(stat.czxid).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_and_distlock_exclude_each_other() {
    let mut t = Interop::start().await;
    let path = "/interop/locks/orders";

    // Curator holds: distlock cannot take it, then gets it once released.
    let answer = t.peer.ask(&format!("mutex {path} 5000"), EVENT).await;
    let node = answer
        .strip_prefix("acquired ")
        .unwrap_or_else(|| panic!("Curator did not acquire: {answer}"));
    assert_curator_node(node, path, "lock-");
    fails_with(
        ErrorKind::WouldBlock,
        "Curator holds it",
        t.distlock.try_lock(path).await,
    );
    // The default layout at `zk://…/interop` maps `orders` to the same node.
    let default_layout = ZkBackend::connect(config(&t.addrs, "/interop", SESSION))
        .await
        .expect("connect with the default layout");
    fails_with(
        ErrorKind::WouldBlock,
        "Curator holds /interop/locks/orders",
        default_layout.try_lock("orders").await,
    );
    drop(default_layout);
    let waiter = tokio::spawn({
        let distlock = t.distlock.clone();
        async move { distlock.lock_timeout(path, EVENT).await }
    });
    until_children(&t.admin, path, 2, EVENT).await;
    assert_eq!(t.peer.ask("release", Duration::ZERO).await, "released");
    let guard = joined(EVENT, "distlock acquires after Curator's release", waiter)
        .await
        .expect("distlock acquires");
    assert_curator_node(guard.key(), path, "lock-");
    assert_eq!(guard.token().0, czxid(&t.admin, guard.key()).await);

    // distlock holds: Curator times out, then gets it once released.
    assert_eq!(
        t.peer
            .ask(&format!("mutex {path} 300"), Duration::from_millis(300))
            .await,
        "timeout"
    );
    t.peer.send(&format!("mutex {path} 10000")).await;
    until_children(&t.admin, path, 2, EVENT).await;
    guard.release().await.expect("release");
    let answer = t.peer.answer(EVENT, "mutex after distlock's release").await;
    assert!(answer.starts_with("acquired "), "{answer}");
    assert_eq!(t.peer.ask("release", Duration::ZERO).await, "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_latch_and_distlock_agree_on_the_leader() {
    let mut t = Interop::start().await;
    let path = "/interop/leader";
    let name = LockName::new(path).unwrap();

    // Curator leads: distlock reports its id.
    assert_eq!(
        t.peer
            .ask(&format!("latch {path} curator-1"), Duration::ZERO)
            .await,
        "started"
    );
    assert_eq!(t.peer.ask("await 5000", EVENT).await, "leader");
    let leader = leader_of(&t.distlock, &name, "Curator's latch").await;
    assert_eq!(leader.value_lossy(), "curator-1");
    assert_curator_node(&leader.key, path, "latch-");
    assert_eq!(leader.token.0, czxid(&t.admin, &leader.key).await);
    let mut observed = t.distlock.observe(&name).await.expect("observe");
    let first = next_ok(EVENT, "the current leader is observed", &mut observed).await;
    assert_eq!(first.value_lossy(), "curator-1");

    // distlock queues behind Curator and leads once Curator's latch closes.
    let campaign = tokio::spawn({
        let distlock = t.distlock.clone();
        let name = name.clone();
        async move {
            let options = AcquireOptions::new().wait(Wait::Timeout(EVENT));
            distlock
                .campaign(
                    &name,
                    Candidacy::new("distlock-1").with_options(options.clone()),
                )
                .await
        }
    });
    until_children(&t.admin, path, 2, EVENT).await;
    assert_eq!(t.peer.ask("has-leadership", Duration::ZERO).await, "leader");
    assert_eq!(
        t.peer.ask(&format!("leader {path}"), Duration::ZERO).await,
        "leader-id curator-1"
    );
    assert_eq!(t.peer.ask("unlatch", Duration::ZERO).await, "closed");
    let leadership = joined(EVENT, "distlock leads after the latch closed", campaign)
        .await
        .expect("distlock leads");
    assert_curator_node(leadership.key(), path, "latch-");
    let next = next_ok(EVENT, "the new leader is observed", &mut observed).await;
    assert_eq!(next.value_lossy(), "distlock-1");

    // distlock leads: Curator reports distlock's value, and a new latch
    // does not lead until distlock resigns.
    assert_eq!(
        t.peer.ask(&format!("leader {path}"), Duration::ZERO).await,
        "leader-id distlock-1"
    );
    assert_eq!(
        t.peer
            .ask(&format!("latch {path} curator-2"), Duration::ZERO)
            .await,
        "started"
    );
    assert_eq!(
        t.peer.ask("await 300", Duration::from_millis(300)).await,
        "not-leader"
    );
    until_children(&t.admin, path, 2, EVENT).await;
    assert_eq!(
        t.peer.ask("has-leadership", Duration::ZERO).await,
        "not-leader"
    );
    leadership.resign().await.expect("resign");
    assert_eq!(t.peer.ask("await 5000", EVENT).await, "leader");
    assert_eq!(
        t.peer.ask(&format!("leader {path}"), Duration::ZERO).await,
        "leader-id curator-2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_layouts_and_paths_are_refused_before_any_io() {
    support::init_tracing();
    // Nothing listens on port 1: these fail while parsing.
    let err = ZkConfig::from_url("zk://127.0.0.1:1?layout=concurrency").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        err.message().contains("\"concurrency\"") && err.message().contains("distlock, curator"),
        "{err}"
    );
    let err = ZkConfig::from_url("zk://127.0.0.1:1/app?layout=curator").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("layout=curator"), "{err}");
    let parsed = ZkConfig::from_url("zk://127.0.0.1:2181?layout=curator").unwrap();
    assert_eq!(parsed.layout, NodeLayout::Curator);

    let zk = standalone().await;
    let Standalone { addrs, admin, .. } = &zk;
    let distlock = curator_backend(addrs).await;
    let cases = [
        ("orders", "must be an absolute ZooKeeper path"),
        ("/app/locks/", "must not end with /"),
        ("/app//orders", "empty component"),
        ("/app/../orders", ". or .. component"),
        ("/app/\u{f000}", "character ZooKeeper forbids"),
        ("/zookeeper/x", "reserves"),
    ];
    for (path, rule) in cases {
        let name = LockName::new(path).unwrap();
        let err = distlock.try_lock(path).await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{path:?}: {err}");
        assert!(err.message().contains(rule), "{path:?}: {err}");
        let err = distlock.leader(&name).await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{path:?}: {err}");
        let err = distlock.observe(&name).await.err().expect("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{path:?}: {err}");
    }
    // Nothing was created: neither the names' nodes nor a lock root.
    let mut children = admin.list_children("/").await.unwrap();
    children.sort();
    assert_eq!(children, ["zookeeper"]);

    // A good path's missing parents are created, as Curator's
    // creatingParentContainersIfNeeded does (as containers, which ZooKeeper
    // does not tell clients apart from persistent nodes).
    let guard = distlock.try_lock("/fresh/locks/x").await.expect("lock");
    assert_curator_node(guard.key(), "/fresh/locks/x", "lock-");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list_show_a_curator_mutex_holder_and_a_distlock_waiter() {
    let mut t = Interop::start().await;
    let path = "/interop/locks/inspected";
    let name = LockName::new(path).unwrap();
    let answer = t.peer.ask(&format!("mutex {path} 5000"), EVENT).await;
    let node = answer
        .strip_prefix("acquired ")
        .unwrap_or_else(|| panic!("Curator did not acquire: {answer}"))
        .to_owned();
    let options = AcquireOptions::new()
        .holder("distlock-waiter")
        .wait(Wait::Timeout(EVENT));
    let waiter = spawn_acquire(t.distlock.clone(), &name, options);
    until_children(&t.admin, path, 2, EVENT).await;

    let status = t.distlock.inspect(&name).await.expect("inspect");
    let holder = status.holder.clone().expect("Curator holds it");
    assert_eq!(holder.key, node, "{status:?}");
    assert_eq!(holder.token.0, czxid(&t.admin, &node).await);
    // What Curator stores in a mutex node: its client's default data, the
    // local IP address unless the application configures another.
    let (data, _) = t.admin.get_data(&node).await.expect("read Curator's node");
    let description = holder.description.expect("Curator's node has data");
    assert_eq!(description.as_bytes(), data);
    assert!(
        description.parse::<std::net::IpAddr>().is_ok(),
        "Curator's default data is an IP address: {description:?}"
    );
    assert!(holder.acquired_at.is_some() && holder.lease_left.is_none());
    assert_eq!(status.waiting, 1, "{status:?}");
    assert_eq!(
        status.waiters[0].description.as_deref(),
        Some("distlock-waiter")
    );
    let listed = t.distlock.list_all("/interop/").await.expect("list");
    let entries: Vec<_> = listed
        .iter()
        .map(|l| (l.name.as_str(), l.holder_token, l.waiting))
        .collect();
    assert_eq!(entries, [(path, Some(holder.token), 1)], "{listed:?}");

    assert_eq!(t.peer.ask("release", Duration::ZERO).await, "released");
    let guard = joined(EVENT, "distlock gets in after Curator", waiter)
        .await
        .expect("distlock acquires");
    guard.release().await.expect("release");
}
