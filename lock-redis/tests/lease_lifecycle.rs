//! The lease lifecycle distlock-core keeps for Redis guards, on real servers:
//! a grant that arrives late in its TTL is still renewed in time, and a
//! grant that arrives after its TTL never becomes a guard.

mod support;

use distlock_redis::ClientConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{DynLockBackend, ErrorKind, LockBackendExt};
use distlock_redis::{RedisBackend, RedisConfig, RedlockBackend, RedlockConfig, ServerAddr};
use distlock_testkit::assert::within;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::RedisServers;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1500);

/// One Redis server behind a fault proxy, and a client that talks to it
/// only through the proxy.
async fn redis_behind_proxy() -> (RedisServers, Vec<FaultProxy>, RedisBackend) {
    let servers = support::start_redises(1).await;
    let upstream: SocketAddr = format!("127.0.0.1:{}", servers.servers()[0].port())
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(upstream).await.expect("start proxy");
    let config = RedisConfig::new("127.0.0.1", proxy.addr().port())
        .with_default_ttl(TTL)
        .with_connect_timeout(Duration::from_secs(3))
        .with_request_timeout(Duration::from_secs(3));
    let client = RedisBackend::connect(config).await.expect("connect");
    (servers, vec![proxy], client)
}

/// Three Redis servers, each behind its own fault proxy, and a Redlock
/// client that talks to them only through the proxies.
async fn redlock_behind_proxies() -> (RedisServers, Vec<FaultProxy>, RedlockBackend) {
    let servers = support::start_redises(3).await;
    let mut proxies = Vec::new();
    for server in servers.servers() {
        let upstream: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
        proxies.push(FaultProxy::start(upstream).await.expect("start proxy"));
    }
    let config = RedlockConfig::new(
        proxies
            .iter()
            .map(|p| ServerAddr::new("127.0.0.1", p.addr().port())),
    )
    .with_default_ttl(TTL)
    .with_connect_timeout(Duration::from_secs(3))
    .with_request_timeout(Duration::from_secs(3));
    let client = RedlockBackend::connect(config).await.expect("connect");
    (servers, proxies, client)
}

fn delay_all(proxies: &[FaultProxy], delay: Duration) {
    for proxy in proxies {
        proxy.delay(delay);
    }
}

/// Measures how long one uncontended acquisition takes with `delay` on
/// every proxy, releasing it again.
async fn acquisition_time(
    client: &DynLockBackend,
    proxies: &[FaultProxy],
    delay: Duration,
) -> Duration {
    delay_all(proxies, delay);
    let start = Instant::now();
    let guard = client
        .try_lock("lifecycle/probe")
        .await
        .expect("probe acquire");
    let took = start.elapsed();
    delay_all(proxies, Duration::ZERO);
    guard.release().await.expect("probe release");
    took
}

/// The per-proxy delay that makes an acquisition take `share` of the TTL,
/// from a linear fit of two measured acquisitions.
async fn delay_for(client: &DynLockBackend, proxies: &[FaultProxy], share: f64) -> Duration {
    let (low, high) = (Duration::from_millis(10), Duration::from_millis(60));
    let t_low = acquisition_time(client, proxies, low).await.as_secs_f64();
    let t_high = acquisition_time(client, proxies, high).await.as_secs_f64();
    let per_delay = (t_high - t_low) / (high - low).as_secs_f64();
    let base = t_low - per_delay * low.as_secs_f64();
    let target = TTL.as_secs_f64() * share;
    Duration::from_secs_f64(((target - base) / per_delay).max(0.0))
}

/// An acquisition that used 70–90 % of its TTL leaves too little validity
/// for the regular TTL/3 renewal; the guard must renew early rather than
/// give up at its deadline.
///
/// The servers are frozen (`SIGSTOP`) while the acquisition is sent and
/// resumed 80 % of the TTL later, so the grant is late while everything
/// after it is healthy: the renewal that the late grant starts at once
/// cannot be slowed by the fault that delayed the grant. (A slowed proxy
/// would race it: the renewal goes out within microseconds of the grant,
/// before the test could take the delay away.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_late_in_its_ttl_is_renewed_in_time() {
    let servers = Arc::new(support::start_redises(3).await);
    let config = RedlockConfig::new(
        servers
            .servers()
            .iter()
            .map(|server| ServerAddr::new("127.0.0.1", server.port())),
    )
    .with_default_ttl(TTL)
    .with_connect_timeout(Duration::from_secs(3))
    .with_request_timeout(Duration::from_secs(3));
    let client = RedlockBackend::connect(config).await.expect("connect");
    let frozen_for = TTL.mul_f64(0.8);
    for server in servers.servers() {
        server.pause();
    }
    let resume = {
        let servers = servers.clone();
        tokio::spawn(async move {
            tokio::time::sleep(frozen_for).await;
            for server in servers.servers() {
                server.resume();
            }
        })
    };
    let start = Instant::now();
    let guard = client.try_lock("lifecycle/late").await.expect("acquire");
    let took = start.elapsed();
    resume.await.expect("resume the servers");
    let share = took.as_secs_f64() / TTL.as_secs_f64();
    assert!(
        (0.7..0.95).contains(&share),
        "the test needs an acquisition of 70-90 % of the TTL, this one took {took:?} ({share:.2})"
    );
    // Watch it for two TTLs: it must stay held throughout.
    let watched = tokio::time::timeout(TTL * 2, guard.lost()).await;
    assert!(
        watched.is_err(),
        "lost a healthy lock granted late in its TTL: {:?}",
        watched.unwrap()
    );
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// A grant that arrives after its lease ran out is never handed out as a
/// guard: the caller gets an error, and the lock is free again.
async fn a_grant_after_its_ttl_never_becomes_a_guard(
    client: &DynLockBackend,
    proxies: &[FaultProxy],
) {
    let delay = delay_for(client, proxies, 1.3).await;
    delay_all(proxies, delay);
    let result = client.try_lock("lifecycle/stale").await;
    delay_all(proxies, Duration::ZERO);
    match result {
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::LeaseLost | ErrorKind::WouldBlock | ErrorKind::Timeout
            ),
            "{e}"
        ),
        Ok(guard) => panic!(
            "a guard was handed out after its TTL (held={}, lost={:?})",
            guard.is_held(),
            guard.lost_signal().reason()
        ),
    }
    within(TTL * 3, "the name is free again", async {
        loop {
            if let Ok(guard) = client.try_lock("lifecycle/stale").await {
                assert!(guard.is_held());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_never_hands_out_a_grant_that_arrived_after_its_ttl() {
    let (_servers, proxies, client) = redis_behind_proxy().await;
    a_grant_after_its_ttl_never_becomes_a_guard(&client, &proxies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_never_hands_out_a_grant_that_arrived_after_its_ttl() {
    let (_servers, proxies, client) = redlock_behind_proxies().await;
    a_grant_after_its_ttl_never_becomes_a_guard(&client, &proxies).await;
}

/// A guard dropped where no runtime is running (its runtime has already
/// shut down) still frees the lock at once, over a blocking connection.
#[test]
fn a_guard_dropped_with_no_runtime_is_released_at_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (server, guard) = runtime.block_on(async {
        let server = support::start_redis().await;
        let client = support::client(&server).await;
        let guard = client.lock("lifecycle/no-runtime").await.expect("lock");
        (server, guard)
    });
    drop(runtime);
    drop(guard);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = support::client(&server).await;
        let why = "free at once after a drop with no runtime";
        support::free_now(&client, "lifecycle/no-runtime", why).await;
    });
}
