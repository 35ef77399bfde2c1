//! Fault tests on real servers: data loss, dead Redlock members, network
//! partitions, bad credentials, unreachable servers and bad input.

mod support;

use distlock_redis::ClientConfig;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Candidacy, ElectionBackend, ErrorKind, LockBackend, LockBackendExt, LockName,
    Wait,
};
use distlock_redis::{RedisBackend, RedisConfig, RedlockBackend};
use distlock_testkit::assert::within;
use distlock_testkit::servers::{RedisServer, RespReply};
use futures::StreamExt;
use support::TTL;
use tokio::time::Instant;

/// Connecting with `config` fails with `kind` in time: within 3 s when
/// `Unavailable` (the connect timeouts here are shorter), 5 s otherwise;
/// `what` says why it must fail.
async fn connect_fails(config: RedisConfig, kind: ErrorKind, what: &str) -> distlock_core::Error {
    let bound = match kind {
        ErrorKind::Unavailable => Duration::from_secs(3),
        _ => Duration::from_secs(5),
    };
    distlock_testkit::assert::fails_within(bound, kind, what, RedisBackend::connect(config)).await
}

/// Runs `fut`, which must finish within `bound`, and says how long it took.
async fn timed<T>(bound: Duration, what: &str, fut: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let output = within(bound, what, fut).await;
    (output, started.elapsed())
}

/// Four clients contend while Redis is restarted without its data; every
/// token granted after the restart is above every token granted before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_keep_rising_after_restart_with_data_loss() {
    let server = support::start_redis().await;
    let name = "faults/restart";
    // (token, acquired at)
    let grants = Arc::new(Mutex::new(Vec::<(u64, Instant)>::new()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = support::client(&server).await;
        let (grants, stop) = (grants.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let stopped = stop.notified();
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    () = &mut stopped => return,
                    result = client.lock_timeout(name, Duration::from_secs(2)) => {
                        if let Ok(guard) = result {
                            grants.lock().unwrap().push((guard.token().get(), Instant::now()));
                            let _ = guard.release().await;
                        }
                    }
                }
            }
        }));
    }
    let wait_for_grants = |n: usize| {
        let grants = grants.clone();
        async move {
            while grants.lock().unwrap().len() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    within(
        Duration::from_secs(10),
        "grants before the restart",
        wait_for_grants(50),
    )
    .await;
    let marker = server
        .command(&["SET", "faults:marker", "1"])
        .await
        .expect("SET marker");
    assert_eq!(marker, RespReply::Simple("OK".into()));
    let restart_began = Instant::now();
    server.restart().await.expect("restart redis");
    let restart_done = Instant::now();
    let lost = server
        .command(&["EXISTS", "faults:marker"])
        .await
        .expect("EXISTS marker");
    assert_eq!(
        lost,
        RespReply::Integer(0),
        "the restart must lose the data"
    );
    let before_count = grants.lock().unwrap().len();
    within(
        Duration::from_secs(15),
        "grants after the restart",
        wait_for_grants(before_count + 50),
    )
    .await;
    stop.notify_waiters();
    for task in tasks {
        within(Duration::from_secs(10), "contender stops", task)
            .await
            .expect("contender panicked");
    }
    let grants = grants.lock().unwrap();
    let before: Vec<u64> = grants
        .iter()
        .filter(|(_, at)| *at < restart_began)
        .map(|(t, _)| *t)
        .collect();
    let after: Vec<u64> = grants
        .iter()
        .filter(|(_, at)| *at > restart_done)
        .map(|(t, _)| *t)
        .collect();
    assert!(
        before.len() >= 50 && after.len() >= 20,
        "{} before, {} after",
        before.len(),
        after.len()
    );
    let highest_before = *before.iter().max().unwrap();
    let lowest_after = *after.iter().min().unwrap();
    assert!(
        lowest_after > highest_before,
        "token {lowest_after} after the restart is not above {highest_before} before it"
    );
}

/// Redlock on three servers with one killed still grants, excludes and
/// hands out rising tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_keeps_working_with_one_of_three_killed() {
    let servers = support::start_redises(3).await;
    let (a, b) = (
        support::redlock_client(&servers).await,
        support::redlock_client(&servers).await,
    );
    servers.server(1).kill().await;
    let mut last = 0;
    for i in 0..20 {
        let (holder, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let guard = within(
            Duration::from_secs(10),
            "lock with one server down",
            holder.lock_timeout("faults/redlock-one-down", Duration::from_secs(5)),
        )
        .await
        .expect("lock with a quorum of two");
        assert!(
            guard.token().get() > last,
            "token {} not above {last}",
            guard.token()
        );
        last = guard.token().get();
        distlock_testkit::assert::fails_with(
            ErrorKind::WouldBlock,
            "held on a quorum",
            other.try_lock("faults/redlock-one-down").await,
        );
        guard.release().await.expect("release on the quorum");
    }
}

/// A Redlock holder keeps its lock while one of three servers is silent (a
/// blackholed connection, not a refused one): renewals complete on the
/// other two without waiting out the request timeout on the silent one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_holder_keeps_its_lock_while_one_server_is_partitioned() {
    let servers = support::start_redises(3).await;
    let proxy = support::proxy_to(servers.server(0)).await;
    let config = support::through_proxy(support::redlock_config_for(&servers), 0, &proxy);
    let holder = RedlockBackend::connect(config).await.expect("connect");
    let other = support::redlock_client(&servers).await;
    let guard = holder.lock("faults/redlock-partition").await.expect("lock");
    proxy.blackhole();
    let until = Instant::now() + TTL * 5;
    while Instant::now() < until {
        assert!(guard.is_held(), "lost: {:?}", guard.lost_signal().reason());
        distlock_testkit::assert::fails_with(
            ErrorKind::WouldBlock,
            "still held on a quorum",
            other.try_lock("faults/redlock-partition").await,
        );
        tokio::time::sleep(TTL / 4).await;
    }
    let (released, took) = timed(Duration::from_secs(2), "release", guard.release()).await;
    released.expect("release on the quorum");
    assert!(
        took < Duration::from_millis(400),
        "release waited for the silent server: {took:?}"
    );
    support::free_now(&other, "faults/redlock-partition", "free after release").await;
}

/// With two of three Redlock servers down, acquiring gives a clear
/// `Unavailable` within its wait, and no guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_with_two_of_three_down_is_unavailable_within_the_wait() {
    let servers = support::start_redises(3).await;
    let client = support::redlock_client(&servers).await;
    servers.server(0).kill().await;
    servers.server(2).kill().await;
    let wait = Duration::from_secs(1);
    let started = Instant::now();
    let err = distlock_testkit::assert::fails_within(
        wait + Duration::from_secs(3),
        ErrorKind::Unavailable,
        "no quorum, no guard",
        client.lock_timeout("faults/redlock-no-quorum", wait),
    )
    .await;
    assert!(err.to_string().contains("2 are needed"), "{err}");
    assert!(started.elapsed() < wait + Duration::from_secs(2));
    distlock_testkit::assert::fails_within(
        Duration::from_secs(3),
        ErrorKind::Unavailable,
        "no quorum, no guard",
        client.try_lock("faults/redlock-no-quorum"),
    )
    .await;
}

/// A holder whose network goes silent (blackholed by the fault proxy) learns
/// that its lock is lost before the server lets anyone else take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holder_partitioned_past_its_ttl_gets_lost_signal_before_takeover() {
    let server = support::start_redis().await;
    let proxy = support::proxy_to(&server).await;
    let config = RedisConfig::new("127.0.0.1", proxy.addr().port())
        .with_default_ttl(TTL)
        .with_request_timeout(Duration::from_millis(200));
    let cut_off = RedisBackend::connect(config)
        .await
        .expect("connect via proxy");
    let other = support::client(&server).await;
    let guard = cut_off.lock("faults/partition").await.expect("lock");
    let signal = guard.lost_signal();
    proxy.blackhole();
    let partitioned = Instant::now();
    let takeover = tokio::spawn(async move {
        let guard = other
            .lock_timeout("faults/partition", Duration::from_secs(10))
            .await
            .expect("takeover after the TTL");
        (Instant::now(), guard)
    });
    let reason = within(TTL + Duration::from_secs(1), "lost signal", signal.lost()).await;
    let lost_at = Instant::now();
    assert!(!guard.is_held(), "guard still claims the lock ({reason})");
    let (taken_at, new_guard) = within(Duration::from_secs(10), "takeover", takeover)
        .await
        .unwrap();
    assert!(
        lost_at <= taken_at,
        "lost after {:?} but taken over after {:?}",
        lost_at - partitioned,
        taken_at - partitioned
    );
    assert!(new_guard.token() > guard.token());
    proxy.restore();
    distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::NotHeld, ErrorKind::LeaseLost],
        "the stale holder must not release the new lock",
        within(Duration::from_secs(5), "stale release", guard.release()).await,
    );
    assert!(new_guard.is_held());
    new_guard.release().await.expect("new holder releases");
}

/// Wrong credentials are `Unauthorized`, and say where and what to check.
#[tokio::test]
async fn wrong_password_is_unauthorized() {
    let server = RedisServer::start_with_password("right-password")
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    for config in [
        support::config_for(&server).with_password("wrong-password"),
        support::config_for(&server),
        support::config_for(&server)
            .with_username("nobody")
            .with_password("right-password"),
    ] {
        let err = connect_fails(config, ErrorKind::Unauthorized, "bad credentials").await;
        assert!(err.to_string().contains(&server.addr()), "{err}");
        assert!(!err.to_string().contains("wrong-password"), "{err}");
    }
    let url = format!("redis://:right-password@{}", server.addr());
    let good = RedisBackend::connect_url(&url)
        .await
        .expect("right password");
    support::lock_and_release(&good, "faults/auth").await;
}

/// A server that refuses connections, and one that accepts but never
/// answers, both give `Unavailable` naming the address, within the connect
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_unavailable_within_connect_timeout() {
    let port = support::free_port();
    let connect_timeout = Duration::from_millis(700);
    let refused = RedisConfig::new("127.0.0.1", port).with_connect_timeout(connect_timeout);
    let err = connect_fails(refused, ErrorKind::Unavailable, "nothing listens").await;
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    let server = support::start_redis().await;
    let proxy = support::proxy_to(&server).await;
    proxy.blackhole();
    let silent =
        RedisConfig::new("127.0.0.1", proxy.addr().port()).with_connect_timeout(connect_timeout);
    let started = Instant::now();
    let err = connect_fails(silent, ErrorKind::Unavailable, "nothing answers").await;
    assert!(started.elapsed() < connect_timeout + Duration::from_millis(500));
    assert!(err.to_string().contains(&proxy.addr().to_string()), "{err}");

    distlock_testkit::assert::fails_with(
        ErrorKind::Unavailable,
        "two of three unreachable",
        RedlockBackend::connect_url(&format!(
            "redlock://127.0.0.1:{port},127.0.0.1:{},127.0.0.1:1?connect_timeout=700ms",
            server.port()
        ))
        .await,
    );
}

/// A zero TTL is `InvalidConfig` before any I/O, in the options and in the
/// config.
#[tokio::test]
async fn zero_ttl_is_invalid_config() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let name = LockName::new("faults/zero-ttl").unwrap();
    let zero = AcquireOptions::new().ttl(Duration::ZERO).wait(Wait::No);
    distlock_testkit::assert::fails_with(
        ErrorKind::InvalidConfig,
        "zero TTL",
        client.acquire(&name, &zero).await,
    );
    distlock_testkit::assert::fails_with(
        ErrorKind::InvalidConfig,
        "zero default TTL",
        RedisBackend::connect(support::config_for(&server).with_default_ttl(Duration::ZERO)).await,
    );
    distlock_testkit::assert::fails_with(
        ErrorKind::InvalidConfig,
        "zero TTL in the URL",
        RedisBackend::connect_url(&format!("{}?ttl=0", server.url())).await,
    );
}

/// A database number the server does not have is `InvalidConfig`.
#[tokio::test]
async fn missing_database_is_invalid_config() {
    let server = support::start_redis().await;
    distlock_testkit::assert::fails_with(
        ErrorKind::InvalidConfig,
        "no such database",
        RedisBackend::connect(support::config_for(&server).with_db(4242)).await,
    );
}

/// A Redlock waiter whose key outlived a failed round on one server (its
/// release there was refused) and whose next round is granted there again
/// takes a fresh token on that server. Meanwhile that server's fence was
/// raised to another holder's token 1000, as the confirm round of that
/// holder does: coming back with 1000 would give two holders one token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_takes_a_fresh_token_where_its_key_lingered() {
    let servers = support::start_redises(3).await;
    let name = "faults/redlock-fresh-token";
    let owner_key = format!("distlock:lock:{{{name}}}:owner");
    let fence_key = format!("distlock:lock:{{{name}}}:fence");
    for server in servers.servers() {
        for args in [
            &["ACL", "SETUSER", "x", "on", ">pw", "~*", "&*", "+@all"][..],
            &["SET", fence_key.as_str(), "100"][..],
        ] {
            let reply = server.command(args).await.expect("command");
            assert_eq!(reply, RespReply::Simple("OK".into()), "{args:?}");
        }
    }
    // Another holder's key on server 1: no round of ours reaches a quorum
    // without server 2.
    servers
        .server(1)
        .command(&["SET", &owner_key, "another-holder", "PX", "30000"])
        .await
        .expect("SET");
    let proxy = support::proxy_to(servers.server(2)).await;
    let config = support::through_proxy(
        support::redlock_config_for(&servers)
            .with_username("x")
            .with_password("pw")
            .with_default_ttl(Duration::from_secs(3))
            .with_request_timeout(Duration::from_millis(400)),
        2,
        &proxy,
    );
    let client = RedlockBackend::connect(config).await.expect("connect");
    // Round 1: server 0 grants, server 1 is busy, server 2 grants but its
    // reply comes after the request timeout, so the round fails.
    proxy.delay(Duration::from_millis(300));
    let acquiring = tokio::spawn(async move {
        let guard = client.lock_timeout(name, Duration::from_secs(10)).await;
        (guard, client)
    });
    let third = servers.server(2);
    within(Duration::from_secs(3), "our key on server 2", async {
        while third
            .command(&["EXISTS", &owner_key])
            .await
            .expect("EXISTS")
            != RespReply::Integer(1)
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    // The round's release is refused there, so our key stays.
    let reply = third
        .command(&["ACL", "SETUSER", "x", "-evalsha"])
        .await
        .expect("ACL SETUSER");
    assert_eq!(reply, RespReply::Simple("OK".into()));
    within(
        Duration::from_secs(3),
        "refused release on server 2",
        async {
            loop {
                let log = third.command(&["ACL", "LOG"]).await.expect("ACL LOG");
                if log.to_string().contains("evalsha") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await;
    for args in [
        &["SET", fence_key.as_str(), "1000"][..],
        &["ACL", "SETUSER", "x", "+evalsha"][..],
    ] {
        let reply = third.command(args).await.expect("command");
        assert_eq!(reply, RespReply::Simple("OK".into()), "{args:?}");
    }
    proxy.delay(Duration::ZERO);
    assert_eq!(
        third
            .command(&["EXISTS", &owner_key])
            .await
            .expect("EXISTS"),
        RespReply::Integer(1),
        "our key on server 2 must have outlived the failed round"
    );
    let (guard, _client) = within(Duration::from_secs(10), "lock", acquiring)
        .await
        .unwrap();
    let guard = guard.expect("lock on servers 0 and 2");
    assert!(
        guard.token().get() > 1000,
        "token {} is not above the fence 1000 that server 2 already had",
        guard.token()
    );
    guard.release().await.expect("release");
}

/// A Redlock member that went silent (blackholed, so calls time out rather
/// than fail) does not hold back waiting acquisitions: each one's first
/// round starts at once and the other two members grant it, well within
/// the request timeout; nor campaigns and observers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_redlock_member_does_not_delay_waiting_acquires() {
    let servers = support::start_redises(3).await;
    let proxy = support::proxy_to(servers.server(0)).await;
    let config = support::through_proxy(
        support::redlock_config_for(&servers).with_request_timeout(Duration::from_secs(1)),
        0,
        &proxy,
    );
    let client = RedlockBackend::connect(config).await.expect("connect");
    proxy.blackhole();
    for i in 0..3 {
        let name = format!("faults/silent-member-{i}");
        let acquire = client.lock_timeout(&name, Duration::from_secs(5));
        let (guard, took) = timed(Duration::from_secs(5), "waiting acquire", acquire).await;
        let guard = guard.expect("lock on the two live members");
        assert!(
            took < Duration::from_millis(400),
            "acquire {i} took {took:?} with a 1 s request timeout"
        );
        guard.release().await.expect("release");
    }
    let election = LockName::new("faults/silent-member-election").unwrap();
    let started = Instant::now();
    let leadership = within(
        Duration::from_secs(5),
        "campaign",
        client.campaign(&election, Candidacy::new("a")),
    )
    .await
    .expect("leader on the two live members");
    let campaigned = started.elapsed();
    let started = Instant::now();
    let mut leaders = within(Duration::from_secs(5), "observe", client.observe(&election))
        .await
        .expect("observe");
    let first = within(Duration::from_secs(5), "first leader", leaders.next())
        .await
        .expect("a leader")
        .expect("read the leader");
    let observed = started.elapsed();
    assert_eq!(first.value, b"a");
    assert!(
        campaigned < Duration::from_millis(400) && observed < Duration::from_millis(400),
        "campaign took {campaigned:?}, the first observed leader {observed:?}, with a 1 s request timeout"
    );
    leadership.resign().await.expect("resign");
}

/// A user whose ACL allows the commands but not the wake-up channels is
/// refused at connect with `Unauthorized` at once, not `Unavailable` after
/// the whole connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_without_channel_permission_is_unauthorized_at_once() {
    let server = support::start_redis().await;
    let created = server
        .command(&[
            "ACL",
            "SETUSER",
            "nochannels",
            "on",
            ">secret",
            "~*",
            "resetchannels",
            "+@all",
        ])
        .await
        .expect("ACL SETUSER");
    assert_eq!(created, RespReply::Simple("OK".into()));
    let config = support::config_for(&server)
        .with_username("nochannels")
        .with_password("secret")
        .with_connect_timeout(Duration::from_secs(3));
    let started = Instant::now();
    let err = connect_fails(config, ErrorKind::Unauthorized, "no channel permission").await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused only after {:?}: {err}",
        started.elapsed()
    );
    assert!(err.to_string().contains(&server.addr()), "{err}");
    assert!(err.to_string().contains("channel"), "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
}

/// With a memory limit, every eviction policy but `noeviction` may evict a
/// held lock's key (volatile-*) or its fence (allkeys-*): connect refuses
/// with `InvalidConfig`. Without a limit nothing is evicted, and a user
/// that may not run `CONFIG GET` (managed Redis) is let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_server_is_refused_at_connect() {
    let server = support::start_redis().await;
    let set = |args: &'static [&'static str]| {
        let server = &server;
        async move {
            let reply = server.command(args).await.expect("command");
            assert_eq!(reply, RespReply::Simple("OK".into()), "{args:?}");
        }
    };
    set(&["CONFIG", "SET", "maxmemory", "1gb"]).await;
    for policy in [
        "volatile-lru",
        "allkeys-lru",
        "volatile-ttl",
        "allkeys-random",
    ] {
        let reply = server
            .command(&["CONFIG", "SET", "maxmemory-policy", policy])
            .await
            .expect("CONFIG SET");
        assert_eq!(reply, RespReply::Simple("OK".into()));
        let err = within(
            Duration::from_secs(5),
            "connect to an evicting server",
            RedisBackend::connect(support::config_for(&server)),
        )
        .await
        .expect_err("eviction may break exclusion");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{policy}: {err}");
        for part in [policy, "noeviction", &server.addr()] {
            assert!(err.to_string().contains(part), "{err}");
        }
    }
    set(&[
        "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config",
    ])
    .await;
    let managed = support::config_for(&server)
        .with_username("noconfig")
        .with_password("pw");
    RedisBackend::connect(managed)
        .await
        .expect("CONFIG GET refused: cannot check, connect anyway");
    set(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]).await;
    support::client(&server).await;
    set(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]).await;
    set(&["CONFIG", "SET", "maxmemory", "0"]).await;
    let client = support::client(&server).await;
    support::lock_and_release(&client, "faults/eviction").await;
}

/// A server that lost its script cache (`SCRIPT FLUSH`, as after a restart
/// or a failover to a replica that never loaded them) gets each script's
/// source with the next call of it, which then does its work: the release
/// frees the lock, and the next grant's token is higher.
#[tokio::test]
async fn a_flushed_script_cache_is_refilled_by_the_next_call() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let name = "faults/flushed-scripts";
    let first = client.lock(name).await.expect("the first grant");
    let first_token = first.token();
    server
        .command(&["SCRIPT", "FLUSH"])
        .await
        .expect("SCRIPT FLUSH");
    let before = server.command_calls("eval").await.expect("INFO");
    first.release().await.expect("the release after the flush");
    let second = within(
        Duration::from_secs(3),
        "the grant after the flush",
        client.lock_timeout(name, Duration::from_secs(2)),
    )
    .await
    .expect("the lock is free again");
    assert!(
        second.token() > first_token,
        "tokens must rise across the flush"
    );
    assert!(
        server.command_calls("eval").await.expect("INFO") - before >= 2,
        "the release and the acquire each sent their source once"
    );
    second.release().await.expect("release");
}
