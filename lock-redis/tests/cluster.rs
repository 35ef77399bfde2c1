//! The Redis Cluster backend on real clusters: a held lock across its
//! master's failover, wake-ups after the node they were subscribed on died,
//! bad URLs, and a cluster that does not answer.

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, ErrorKind, LockBackend, LockBackendExt, LockName, Wait};
use distlock_redis::RedisClusterBackend;
use distlock_testkit::assert::{fails_within, inspect_until, within};
use distlock_testkit::servers::{RedisCluster, RedisClusterNode, RespReply};
use support::cluster::replicated_cluster_and_two_clients;
use tokio::time::Instant;

/// Room for a failover (2–4 s with the launcher's 1 s node timeout) on a
/// loaded machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(20);

/// The number after `field:` in an `INFO replication` reply of `node`.
async fn replication_offset(node: &RedisClusterNode, field: &str) -> u64 {
    let reply = node
        .command(&["INFO", "replication"])
        .await
        .expect("INFO replication");
    let RespReply::Bulk(Some(text)) = reply else {
        panic!("{}: INFO replication answered {reply:?}", node.addr());
    };
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: no {field} in {text}", node.addr()))
}

/// Waits until `replica` has everything `master` wrote so far, so a
/// failover to it loses nothing of a lock granted before this call.
async fn replicated(master: &RedisClusterNode, replica: &RedisClusterNode) {
    let written = replication_offset(master, "master_repl_offset").await;
    within(Duration::from_secs(5), "the replica catches up", async {
        while replication_offset(replica, "slave_repl_offset").await < written {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Kills `master` and waits until one of its replicas took its slots.
async fn fail_over(cluster: &RedisCluster, master: &RedisClusterNode) {
    master.kill().await;
    let took = cluster
        .wait_failover(master)
        .await
        .unwrap_or_else(|e| panic!("failover of {}: {e}", master.addr()));
    eprintln!("failover of {} took {took:?}", master.addr());
}

/// Runs `attempt` again while it fails with a retryable error (the cluster
/// is still settling after a failover), until it decides or panics naming
/// `what` after [`FAILOVER_BOUND`].
async fn until_decided<T, F>(what: &str, attempt: impl Fn() -> F) -> distlock_core::Result<T>
where
    F: Future<Output = distlock_core::Result<T>>,
{
    within(FAILOVER_BOUND, what, async {
        loop {
            match attempt().await {
                Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
                decided => return decided,
            }
        }
    })
    .await
}

/// A lock whose master fails over (to a replica that has its keys) stays
/// exclusive: the holder's guard either renews against the promoted master
/// (and a second client is refused until it releases) or reports the loss;
/// either way the second client's token is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_lock_stays_exclusive_or_reports_its_loss_across_a_failover() {
    let (cluster, holder, other) = replicated_cluster_and_two_clients().await;
    let name = LockName::new("cluster/failover").unwrap();
    // Long enough to outlast the failover, so that both outcomes can occur.
    let ttl = Duration::from_secs(8);
    let guard = holder
        .acquire(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquire");
    let first = guard.token();
    let master = cluster.master_for_key(guard.key()).await.expect("master");
    let replicas = cluster.replicas_of(master).await.expect("replicas");
    replicated(master, replicas[0]).await;
    fail_over(&cluster, master).await;

    // Renew until the promoted master answers either way.
    let renewed = until_decided("a renewal that decides", || guard.renew()).await;
    let next = match renewed {
        Ok(()) => {
            eprintln!("the holder renewed on the promoted master");
            assert!(guard.is_held());
            let refused = other.try_lock(name.as_str()).await;
            let err = refused.expect_err("a second holder while the first renews");
            assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
            guard
                .release()
                .await
                .expect("release on the promoted master");
            other
                .try_lock(name.as_str())
                .await
                .expect("free after release")
        }
        Err(e) => {
            eprintln!("the holder lost the lock: {e}");
            assert_eq!(e.kind(), ErrorKind::LeaseLost, "{e}");
            assert!(!guard.is_held());
            within(FAILOVER_BOUND, "the lost signal", guard.lost()).await;
            other
                .lock_timeout(name.as_str(), ttl + Duration::from_secs(2))
                .await
                .expect("free after the loss")
        }
    };
    assert!(
        next.token() > first,
        "token {} after the failover is not above {first}",
        next.token()
    );
    next.release().await.expect("release");
}

/// A waiter's wake-up still arrives, at once and not by its timer, after
/// the node its client was subscribed on died: the subscription moved to
/// another seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wake_ups_arrive_after_the_subscribed_node_died() {
    let (cluster, holder, waiter) = replicated_cluster_and_two_clients().await;
    // Every client subscribes on the first seed first: the first node.
    let first = cluster.node(0);
    let masters = cluster.masters().await.expect("masters");
    if masters.iter().any(|m| m.port() == first.port()) {
        fail_over(&cluster, first).await;
    } else {
        first.kill().await;
    }
    handed_over_promptly(&holder, &waiter, "cluster/wake").await;
}

/// A first seed that accepts connections but never answers holds up
/// neither connect (within its timeout) nor wake-ups: they are subscribed
/// on the next seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_first_seed_holds_up_neither_connect_nor_wake_ups() {
    let cluster = support::cluster::start_cluster(3, 0).await;
    // Accepts connections (the kernel completes the handshake) and never
    // answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent = listener.local_addr().expect("address");
    let url = format!(
        "redis+cluster://{silent},{}?connect_timeout=2s",
        cluster.addrs().join(",")
    );
    let connect = || async {
        within(
            Duration::from_secs(3),
            "connect past a silent seed",
            RedisClusterBackend::connect_url(&url),
        )
        .await
        .expect("connect")
    };
    let (holder, waiter) = (connect().await, connect().await);
    handed_over_promptly(&holder, &waiter, "cluster/silent-seed").await;
}

/// `waiter` queues for `name` while `holder` holds it with a long TTL, and
/// gets it at once when `holder` releases: by its wake-up, not by its
/// timers (every TTL/3), which the long TTL rules out.
async fn handed_over_promptly(
    holder: &RedisClusterBackend,
    waiter: &RedisClusterBackend,
    name: &str,
) {
    let name = LockName::new(name).unwrap();
    let ttl = Duration::from_secs(30);
    let options = AcquireOptions::new().ttl(ttl);
    let guard = until_decided("acquire", || holder.acquire(&name, &options))
        .await
        .expect("acquire");
    let wait = tokio::spawn({
        let (name, waiter) = (name.clone(), waiter.clone());
        async move {
            let options = AcquireOptions::new()
                .ttl(ttl)
                .wait(Wait::Timeout(Duration::from_secs(20)));
            waiter.acquire(&name, &options).await
        }
    });
    inspect_until(
        holder,
        &name,
        Duration::from_secs(5),
        "the waiter queues",
        |s| s.waiting == 1,
    )
    .await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let next = within(Duration::from_secs(5), "the hand-over", wait)
        .await
        .expect("waiter task")
        .expect("the waiter gets the lock");
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the hand-over took {took:?}: the wake-up was lost and a timer found it"
    );
    next.release().await.expect("release");
}

/// A name that empties the hash tag spreads a lock's keys over slots; the
/// cluster refuses the script, and the error says why.
#[tokio::test]
async fn a_name_that_empties_the_hash_tag_is_an_invalid_name() {
    let cluster = support::cluster::start_cluster(3, 0).await;
    let client = support::cluster::cluster_client(&cluster).await;
    let err = client.try_lock("}jobs").await.expect_err("CROSSSLOT");
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    assert!(err.to_string().contains("must not start with '}'"), "{err}");
    support::lock_and_release(&client, "jobs}").await;
}

#[tokio::test]
async fn bad_cluster_urls_are_invalid_config_naming_the_problem() {
    let cases = [
        ("redis+cluster://", "no host"),
        ("redis+cluster://127.0.0.1:7000/1", "only database 0"),
        (
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7000",
            "listed twice",
        ),
        ("redis+cluster://127.0.0.1:7000?ttl=never", "option ttl"),
        ("redis+cluster://127.0.0.1:7000?prefix=a{b", "hash tag"),
    ];
    for (url, needle) in cases {
        let err = fails_within(
            Duration::from_secs(1),
            ErrorKind::InvalidConfig,
            url,
            RedisClusterBackend::connect_url(url),
        )
        .await;
        assert!(err.to_string().contains(needle), "{url}: {err}");
    }
}

/// Seeds that refuse connections, and a seed that accepts but never
/// answers, are `Unavailable` naming every seed, within the connect timeout.
#[tokio::test]
async fn an_unreachable_cluster_is_unavailable_naming_its_seeds_in_time() {
    let (a, b) = (support::free_port(), support::free_port());
    // Accepts connections (the kernel completes the handshake) and never
    // answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = silent.local_addr().expect("address").port();
    for ports in [vec![a, b], vec![c]] {
        let seeds: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let url = format!("redis+cluster://{}?connect_timeout=1s", seeds.join(","));
        let err = fails_within(
            Duration::from_secs(3),
            ErrorKind::Unavailable,
            &url,
            RedisClusterBackend::connect_url(&url),
        )
        .await;
        assert!(err.is_retryable(), "{err}");
        for seed in &seeds {
            assert!(err.to_string().contains(seed.as_str()), "{url}: {err}");
        }
    }
}

/// Non-fair (`fair=false`) clients on a cluster: FIFO is not declared, a
/// release wakes the waiter at once (its lease is far longer than the
/// bound), and a fair client of the same name is excluded while it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn non_fair_clients_race_on_the_locks_master() {
    let cluster = support::cluster::start_cluster(3, 0).await;
    let config = support::cluster::cluster_config_for(&cluster).with_fair(false);
    let racer = RedisClusterBackend::connect(config.clone())
        .await
        .expect("connect");
    let waiter = RedisClusterBackend::connect(config).await.expect("connect");
    let fair = support::cluster::cluster_client(&cluster).await;
    assert!(!racer.capabilities().fifo);
    assert!(fair.capabilities().fifo);
    let name = LockName::new("cluster/nonfair").unwrap();
    let long = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever);
    let held = racer.acquire(&name, &long).await.expect("acquire");
    let first = held.token();
    let err = fair.try_lock("cluster/nonfair").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let task = {
        let (name, long) = (name.clone(), long.clone());
        tokio::spawn(async move { waiter.acquire(&name, &long).await })
    };
    inspect_until(
        &fair,
        &name,
        Duration::from_secs(10),
        "a registered waiter",
        |s| s.waiting == 1,
    )
    .await;
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(3), "the woken waiter's grant", task)
        .await
        .expect("waiter task")
        .expect("acquire");
    assert!(guard.token() > first);
    guard.release().await.expect("release");
}
