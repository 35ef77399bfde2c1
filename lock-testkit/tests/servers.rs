//! The real-server launchers start, fail over, restart and report missing
//! binaries. These tests run real etcd, Redis and ZooKeeper processes
//! (install them with `scripts/install-servers.sh`).

use std::future::Future;
use std::time::{Duration, Instant};

use distlock_testkit::servers::zk::four_letter_word;
use distlock_testkit::servers::{
    EtcdCluster, EtcdOptions, LaunchError, RedisOptions, RedisServer, RedisServers, RespReply,
    ZkEnsemble, ZkOptions,
};

/// Polls `check` every 25 ms until it returns `Some`, or panics with `what`
/// after `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn assert_names_install_script(err: &LaunchError, program: &str, package: &str) {
    let message = err.to_string();
    assert!(
        matches!(err, LaunchError::Missing { .. }),
        "unexpected error: {message}"
    );
    assert!(
        message.starts_with(&format!("{program} not found")),
        "{message}"
    );
    assert!(message.contains("scripts/install-servers.sh"), "{message}");
    assert!(
        message.contains(&format!("Debian package {package}")),
        "{message}"
    );
}

#[tokio::test]
async fn etcd_single_member_is_healthy_and_restarts_on_same_port() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let member = cluster.member(0);
    assert!(member.is_healthy().await);
    assert_eq!(cluster.endpoints(), vec![member.endpoint()]);
    assert_eq!(
        cluster.client_urls(),
        vec![format!("http://{}", member.endpoint())]
    );
    assert_eq!(cluster.leader_index().await, Some(0));

    member.kill().await;
    assert!(!member.is_running());
    assert!(!member.is_healthy().await);
    member.restart().await.expect("restart etcd");
    assert!(member.is_healthy().await);
}

#[tokio::test]
async fn etcd_three_members_stay_healthy_when_one_is_killed() {
    let cluster = EtcdCluster::start(3).await.expect("start etcd cluster");
    for member in cluster.members() {
        assert!(member.is_healthy().await, "{} not healthy", member.name());
    }
    let leader = eventually(Duration::from_secs(5), "an etcd leader", || {
        cluster.leader_index()
    })
    .await;

    let victim = cluster.member(leader);
    victim.kill().await;
    let survivors: Vec<_> = cluster
        .members()
        .iter()
        .filter(|m| m.is_running())
        .collect();
    assert_eq!(survivors.len(), 2);
    eventually(Duration::from_secs(10), "two healthy survivors", || async {
        for member in &survivors {
            if !member.is_healthy().await {
                return None;
            }
        }
        Some(())
    })
    .await;
    let new_leader = eventually(Duration::from_secs(10), "a new etcd leader", || {
        cluster.leader_index()
    })
    .await;
    assert_ne!(new_leader, leader);

    victim.restart().await.expect("restart etcd member");
    for member in cluster.members() {
        assert!(
            member.is_healthy().await,
            "{} not healthy after restart",
            member.name()
        );
    }
}

#[tokio::test]
async fn etcd_paused_member_is_unhealthy_until_resumed() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let member = cluster.member(0);
    member.pause();
    assert!(member.is_paused() && member.is_running());
    assert!(
        !member.is_healthy().await,
        "a stopped etcd answered /health"
    );
    member.resume();
    assert!(!member.is_paused());
    eventually(
        Duration::from_secs(10),
        "etcd healthy after resume",
        || async { member.is_healthy().await.then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn redis_restart_comes_back_on_same_port_without_data() {
    let server = RedisServer::start().await.expect("start redis");
    assert_eq!(server.url(), format!("redis://{}", server.addr()));
    let ping = server.command(&["PING"]).await.expect("ping");
    assert_eq!(ping, RespReply::Simple("PONG".into()));
    server
        .command(&["SET", "fencing", "41"])
        .await
        .expect("set");
    assert_eq!(
        server.command(&["INCR", "fencing"]).await.expect("incr"),
        RespReply::Integer(42)
    );

    server.restart().await.expect("restart redis");
    let after = server.command(&["GET", "fencing"]).await.expect("get");
    assert!(after.is_nil(), "data survived a restart: {after}");
}

#[tokio::test]
async fn redis_servers_are_independent() {
    let servers = RedisServers::start(3).await.expect("start redis servers");
    assert_eq!(servers.addrs().len(), 3);
    for (i, server) in servers.servers().iter().enumerate() {
        let ping = server.command(&["PING"]).await.expect("ping");
        assert_eq!(ping.as_text(), Some("PONG"));
        server
            .command(&["SET", "who", &i.to_string()])
            .await
            .expect("set");
    }
    for (i, server) in servers.servers().iter().enumerate() {
        let who = server.command(&["GET", "who"]).await.expect("get");
        assert_eq!(who.to_string(), i.to_string());
    }
    servers.server(1).kill().await;
    assert!(servers.server(1).command(&["PING"]).await.is_err());
    assert!(servers.server(0).command(&["PING"]).await.is_ok());
}

#[tokio::test]
async fn redis_with_password_refuses_unauthenticated_clients() {
    let server = RedisServer::start_with_password("s3cret")
        .await
        .expect("start redis");
    let refused = server
        .command_unauthenticated(&["PING"])
        .await
        .expect("ping");
    assert!(
        matches!(&refused, RespReply::Error(e) if e.starts_with("NOAUTH")),
        "{refused:?}"
    );
    let accepted = server.command(&["PING"]).await.expect("authenticated ping");
    assert_eq!(accepted.as_text(), Some("PONG"));
    assert_eq!(
        server.authenticated_url(),
        format!("redis://:s3cret@{}", server.addr())
    );
    assert!(
        !format!("{server:?}").contains("s3cret"),
        "Debug leaks the password"
    );
}

#[tokio::test]
async fn redis_paused_server_answers_after_resume() {
    let server = RedisServer::start().await.expect("start redis");
    server.pause();
    let stalled = tokio::time::timeout(Duration::from_millis(300), server.command(&["PING"])).await;
    assert!(stalled.is_err(), "a stopped redis answered");
    server.resume();
    let ping = tokio::time::timeout(Duration::from_secs(5), server.command(&["PING"]))
        .await
        .expect("redis answers after resume")
        .expect("ping");
    assert_eq!(ping.as_text(), Some("PONG"));
}

#[tokio::test]
async fn zk_standalone_serves() {
    let zk = ZkEnsemble::start(1).await.expect("start zookeeper");
    assert_eq!(zk.member(0).mode().await.as_deref(), Some("standalone"));
    assert_eq!(zk.connect_string(), zk.member(0).addr());
    assert_eq!(zk.leader_index().await, Some(0));
    let ruok = four_letter_word(&zk.member(0).addr(), "ruok")
        .await
        .expect("ruok");
    assert_eq!(ruok, "imok");
}

#[tokio::test]
async fn zk_ensemble_elects_new_leader_and_survives_pause() {
    let zk = ZkEnsemble::start(3)
        .await
        .expect("start zookeeper ensemble");
    assert_eq!(zk.connect_string().split(',').count(), 3);
    for member in zk.members() {
        let mode = member.mode().await;
        assert!(
            matches!(mode.as_deref(), Some("leader" | "follower")),
            "server {} mode {mode:?}",
            member.id()
        );
    }
    let leader = eventually(Duration::from_secs(5), "a ZooKeeper leader", || {
        zk.leader_index()
    })
    .await;

    zk.member(leader).kill().await;
    let new_leader = eventually(Duration::from_secs(15), "a new ZooKeeper leader", || {
        zk.leader_index()
    })
    .await;
    assert_ne!(new_leader, leader);

    zk.member(leader)
        .restart()
        .await
        .expect("restart old leader");
    assert_eq!(zk.member(leader).mode().await.as_deref(), Some("follower"));

    let follower = (0..3).find(|&i| i != new_leader).expect("a follower");
    zk.member(follower).pause();
    assert!(
        zk.member(follower).mode().await.is_none(),
        "a stopped server answered srvr"
    );
    zk.member(follower).resume();
    eventually(
        Duration::from_secs(15),
        "the paused server to serve again",
        || async { zk.member(follower).mode().await },
    )
    .await;
}

#[tokio::test]
async fn missing_binaries_name_the_install_script() {
    let etcd = EtcdCluster::start_with(EtcdOptions::new(1).binary("/nonexistent/etcd"))
        .await
        .expect_err("etcd from a nonexistent path");
    assert_names_install_script(&etcd, "etcd", "etcd-server");

    let redis = RedisServer::start_with(RedisOptions::new().binary("/nonexistent/redis-server"))
        .await
        .expect_err("redis from a nonexistent path");
    assert_names_install_script(&redis, "redis-server", "redis-server");

    let java = ZkEnsemble::start_with(ZkOptions::new(1).java("/nonexistent/java"))
        .await
        .expect_err("java from a nonexistent path");
    assert_names_install_script(&java, "java", "default-jre-headless");

    let jar = ZkEnsemble::start_with(ZkOptions::new(1).jar_dir("/nonexistent"))
        .await
        .expect_err("zookeeper.jar from a nonexistent dir");
    assert_names_install_script(&jar, "ZooKeeper (zookeeper.jar)", "zookeeper");
    assert!(
        jar.to_string().contains("at /nonexistent/zookeeper.jar"),
        "{jar}"
    );
}

#[tokio::test]
async fn server_dying_at_startup_reports_its_log() {
    // `sh -c` runs its first argument (`--port`) as a command, which fails.
    let err = RedisServer::start_with(RedisOptions::new().binary("/bin/sh"))
        .await
        .expect_err("a server that exits at once");
    let message = err.to_string();
    assert!(matches!(err, LaunchError::Exited { .. }), "{message}");
    assert!(message.contains("exited during startup"), "{message}");
    assert!(message.contains("last lines of"), "{message}");
    assert!(
        message.contains("distlock-testkit: starting redis-server"),
        "{message}"
    );
}
