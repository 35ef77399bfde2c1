//! The Redis Cluster launcher starts a real cluster (redis-server and
//! redis-cli, Debian packages redis-server and redis-tools), finds a key's
//! master, fails a killed master over to its replica, and reports missing
//! binaries.

use std::time::Duration;

use distlock_testkit::servers::{
    LaunchError, Member, RedisCluster, RedisClusterNode, RedisClusterOptions, RespReply,
};

/// With a 1 s node timeout a failover takes 2–4 s; this leaves room for a
/// loaded machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(10);
/// How long a paused node is given to (wrongly) answer; well below the
/// node timeout, so that the pause fails nothing over.
const PAUSED_PROBE: Duration = Duration::from_millis(200);
/// A key with a hash tag, as every key of one distlock lock has.
const KEY: &str = "{distlock:cluster-kit}:key";

async fn cluster_info(node: &RedisClusterNode) -> String {
    node.command(&["CLUSTER", "INFO"])
        .await
        .expect("CLUSTER INFO")
        .to_string()
}

fn assert_cluster_ok(node: &RedisClusterNode, info: &str) {
    assert!(info.contains("cluster_state:ok"), "{}: {info}", node.addr());
    assert!(
        info.contains("cluster_slots_assigned:16384"),
        "{}: {info}",
        node.addr()
    );
}

#[tokio::test]
async fn three_masters_with_replicas_start_and_every_node_is_ok() {
    let cluster = RedisCluster::start(3, 1).await.expect("start cluster");
    assert_eq!(cluster.nodes().len(), 6);
    for node in cluster.nodes() {
        assert_cluster_ok(node, &cluster_info(node).await);
        assert!(!node.id().is_empty(), "{} has no id", node.addr());
    }
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", cluster.addrs().join(","))
    );
    let masters = cluster.masters().await.expect("masters");
    assert_eq!(masters.len(), 3, "{masters:?}");
    for master in masters {
        let replicas = cluster.replicas_of(master).await.expect("replicas");
        assert_eq!(replicas.len(), 1, "{}: {replicas:?}", master.addr());
    }
}

#[tokio::test]
async fn a_key_written_through_its_slot_master_is_read_back_there_and_pause_stalls_it() {
    let cluster = RedisCluster::start(3, 0).await.expect("start cluster");
    let master = cluster.master_for_key(KEY).await.expect("master of key");
    let set = master.command(&["SET", KEY, "v1"]).await.expect("SET");
    assert_eq!(set, RespReply::Simple("OK".to_owned()));
    let get = master.command(&["GET", KEY]).await.expect("GET");
    assert_eq!(get, RespReply::Bulk(Some("v1".to_owned())));
    for other in cluster.nodes().iter().filter(|n| n.port() != master.port()) {
        let reply = other.command(&["GET", KEY]).await.expect("GET elsewhere");
        assert!(
            matches!(&reply, RespReply::Error(moved) if moved.starts_with("MOVED ") && moved.ends_with(&master.addr())),
            "{} answered {reply:?}",
            other.addr()
        );
    }

    Member::pause(master);
    let stalled = tokio::time::timeout(PAUSED_PROBE, master.command(&["GET", KEY])).await;
    assert!(stalled.is_err(), "a paused master answered {stalled:?}");
    Member::resume(master);
    let get = master
        .command(&["GET", KEY])
        .await
        .expect("GET after resume");
    assert_eq!(get, RespReply::Bulk(Some("v1".to_owned())));
}

#[tokio::test]
async fn a_killed_master_fails_over_to_its_replica_and_rejoins_as_replica() {
    let cluster = RedisCluster::start(3, 1).await.expect("start cluster");
    let old = cluster.master_for_key(KEY).await.expect("master of key");
    let replicas = cluster.replicas_of(old).await.expect("replicas");
    assert_eq!(replicas.len(), 1, "{replicas:?}");
    let set = old.command(&["SET", KEY, "v1"]).await.expect("SET");
    assert_eq!(set, RespReply::Simple("OK".to_owned()));

    Member::kill(old).await;
    let took = cluster.wait_failover(old).await.expect("failover");
    assert!(took < FAILOVER_BOUND, "failover took {took:?}");
    let new = cluster
        .master_for_key(KEY)
        .await
        .expect("new master of key");
    assert_eq!(new.port(), replicas[0].port(), "{new:?} took over");
    for node in cluster.nodes().iter().filter(|n| n.port() != old.port()) {
        assert_cluster_ok(node, &cluster_info(node).await);
    }
    let survived = new.command(&["GET", KEY]).await.expect("GET on new master");
    println!("failover took {took:?}; the key after failover: {survived}");

    Member::restart(old).await.expect("restart old master");
    cluster
        .wait_ok()
        .await
        .expect("cluster ok with the old master back");
    let rejoined = cluster.replicas_of(new).await.expect("replicas of new");
    assert!(
        rejoined.iter().any(|n| n.port() == old.port()),
        "old master is not a replica of the new one: {rejoined:?}"
    );
}

#[tokio::test]
async fn missing_binaries_name_their_debian_packages() {
    let server = RedisCluster::start_with(RedisClusterOptions {
        server_binary: Some("/nonexistent/redis-server".into()),
        ..RedisClusterOptions::new(3, 1)
    })
    .await
    .expect_err("redis-server from a nonexistent path");
    let cli = RedisCluster::start_with(RedisClusterOptions {
        cli_binary: Some("/nonexistent/redis-cli".into()),
        ..RedisClusterOptions::new(3, 1)
    })
    .await
    .expect_err("redis-cli from a nonexistent path");
    for (err, program, package) in [
        (server, "redis-server", "redis-server"),
        (cli, "redis-cli", "redis-tools"),
    ] {
        let message = err.to_string();
        assert!(matches!(err, LaunchError::Missing { .. }), "{message}");
        assert!(
            message.starts_with(&format!("{program} not found")),
            "{message}"
        );
        assert!(
            message.contains(&format!("Debian package {package}")),
            "{message}"
        );
    }
}

#[tokio::test]
async fn fewer_than_three_masters_is_refused() {
    let err = RedisCluster::start(2, 1).await.expect_err("two masters");
    let message = err.to_string();
    assert!(message.contains("at least 3"), "{message}");
}
