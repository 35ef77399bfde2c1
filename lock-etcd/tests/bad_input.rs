//! Bad input and dead servers give typed errors within the configured
//! timeouts, never a hang: wrong password, unreachable or silent endpoints,
//! a dead server after connecting, a zero TTL.

mod support;

use distlock_etcd::ClientConfig;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use distlock_core::{AcquireOptions, ErrorKind, LockBackend, LockBackendExt, LockName, Wait};
use distlock_etcd::{EtcdBackend, EtcdConfig};
use distlock_testkit::proxy::FaultProxy;
use tokio::time::{Instant, timeout};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Scheduling slack on top of a configured timeout before calling it a hang.
const SLACK: Duration = Duration::from_secs(2);

fn config(endpoints: Vec<String>) -> EtcdConfig {
    support::config_for(endpoints)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_request_timeout(REQUEST_TIMEOUT)
}

/// A loopback port with nothing listening on it.
fn dead_endpoint() -> String {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("127.0.0.1:{port}")
}

async fn connect_within_bound(
    config: EtcdConfig,
) -> (distlock_core::Result<EtcdBackend>, Duration) {
    let start = Instant::now();
    let result = timeout(CONNECT_TIMEOUT + SLACK, EtcdBackend::connect(config))
        .await
        .expect("connect must give up within its connect timeout");
    (result, start.elapsed())
}

#[tokio::test]
async fn wrong_password_is_unauthorized_and_names_the_address() {
    let cluster = support::start_cluster(1).await;
    let mut admin = support::raw_client(&cluster).await;
    admin
        .user_add("root", "right-password", None)
        .await
        .expect("add root");
    admin
        .user_grant_role("root", "root")
        .await
        .expect("grant root");
    admin.auth_enable().await.expect("enable auth");

    let endpoints = cluster.endpoints();
    let (result, _) = connect_within_bound(
        config(endpoints.clone()).with_credentials("root", "not-the-password-7f3a"),
    )
    .await;
    let err = result.expect_err("a wrong password must be refused");
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(err.to_string().contains(&endpoints[0]), "{err}");
    assert!(
        !err.to_string().contains("7f3a"),
        "the password leaked: {err}"
    );

    let (result, _) =
        connect_within_bound(config(endpoints).with_credentials("root", "right-password")).await;
    let backend = result.expect("the right password connects");
    let guard = backend
        .try_lock("auth/works")
        .await
        .expect("lock with auth");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn unreachable_endpoints_are_unavailable_within_the_connect_timeout() {
    let endpoints = vec![dead_endpoint(), dead_endpoint()];
    let (result, elapsed) = connect_within_bound(config(endpoints.clone())).await;
    let err = result.expect_err("nothing listens there");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains(&endpoints[0]), "{err}");
    assert!(elapsed <= CONNECT_TIMEOUT + SLACK, "took {elapsed:?}");
}

/// Nothing listening is known at once (the port refuses), as with Redis and
/// ZooKeeper: no waiting out the connect timeout, and a message that names
/// the endpoint in plain words, not the gRPC stack's debug output.
#[tokio::test]
async fn a_refused_connection_fails_fast_naming_the_endpoint() {
    let endpoint = dead_endpoint();
    let (result, elapsed) = connect_within_bound(config(vec![endpoint.clone()])).await;
    let err = result.expect_err("nothing listens there");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains(&endpoint) && text.contains("connection refused"),
        "{text}"
    );
    for noise in ["tonic", "ConnectError", "Transport,", "Os {"] {
        assert!(!text.contains(noise), "debug output in the message: {text}");
    }
    assert!(
        elapsed < CONNECT_TIMEOUT / 4,
        "took {elapsed:?} to see a refused connection (connect timeout {CONNECT_TIMEOUT:?})"
    );
}

#[tokio::test]
async fn a_silent_endpoint_is_unavailable_within_the_connect_timeout() {
    // Accepts TCP connections but never answers, like a frozen server.
    let upstream: SocketAddr = dead_endpoint().parse().unwrap();
    let proxy = FaultProxy::start(upstream).await.expect("proxy");
    proxy.blackhole();
    let (result, elapsed) = connect_within_bound(config(vec![proxy.addr().to_string()])).await;
    let err = result.expect_err("a silent server must not count as connected");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(elapsed >= CONNECT_TIMEOUT / 2, "gave up after {elapsed:?}");
}

#[tokio::test]
async fn requests_to_a_frozen_server_time_out_within_the_request_timeout() {
    let cluster = support::start_cluster(1).await;
    let (proxy, backend) = support::behind_proxy(&cluster, config).await;
    proxy.blackhole();
    for wait in [
        Wait::No,
        Wait::Timeout(Duration::from_millis(200)),
        Wait::Forever,
    ] {
        let name = LockName::new("frozen/server").unwrap();
        let options = AcquireOptions::new().wait(wait);
        let start = Instant::now();
        let err = timeout(REQUEST_TIMEOUT + SLACK, backend.acquire(&name, &options))
            .await
            .unwrap_or_else(|_| panic!("{wait:?}: acquire hung on a frozen server"))
            .expect_err("nothing answers");
        assert!(
            matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
            "{wait:?}: {err}"
        );
        assert!(err.is_retryable(), "{err}");
        assert!(
            start.elapsed() <= REQUEST_TIMEOUT + SLACK,
            "{wait:?}: {:?}",
            start.elapsed()
        );
    }
    proxy.restore();
}

#[tokio::test]
async fn requests_after_the_server_died_fail_as_unavailable() {
    let cluster = support::start_cluster(1).await;
    let backend = EtcdBackend::connect(config(cluster.endpoints()))
        .await
        .expect("connect");
    cluster.member(0).kill().await;
    let start = Instant::now();
    let err = distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::Unavailable, ErrorKind::Timeout],
        "the server is gone",
        timeout(REQUEST_TIMEOUT + SLACK, backend.try_lock("dead/server"))
            .await
            .expect("try_lock must not hang when the server is gone"),
    );
    assert!(err.to_string().contains(&cluster.endpoints()[0]), "{err}");
    assert!(start.elapsed() <= REQUEST_TIMEOUT + SLACK);
}

#[tokio::test]
async fn zero_ttl_is_invalid_config_everywhere_it_can_be_given() {
    let err = EtcdConfig::new(["127.0.0.1:2379"])
        .with_default_ttl(Duration::ZERO)
        .validate()
        .expect_err("zero default TTL");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = EtcdConfig::from_url("etcd://127.0.0.1:2379?ttl=0s").expect_err("zero URL TTL");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let mut zero = config(vec![dead_endpoint()]);
    zero.default_ttl = Duration::ZERO;
    let err = EtcdBackend::connect(zero)
        .await
        .expect_err("zero TTL config");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

#[tokio::test]
async fn unreadable_tls_files_are_invalid_config_naming_the_file() {
    let missing = std::env::temp_dir().join("distlock-no-such-ca.pem");
    let config = config(vec![dead_endpoint()]).with_tls_ca(&missing);
    let err = EtcdBackend::connect(config)
        .await
        .expect_err("the CA file does not exist");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("distlock-no-such-ca.pem"), "{err}");
}

#[tokio::test]
async fn ttls_below_a_second_are_refused_and_others_round_up_to_whole_seconds() {
    let cluster = support::start_cluster(1).await;
    let backend = support::backend(&cluster).await;
    let name = LockName::new("ttl/rounding").unwrap();
    assert_eq!(backend.capabilities().min_ttl, Duration::from_secs(1));
    let short = AcquireOptions::new()
        .ttl(Duration::from_millis(300))
        .wait(Wait::No);
    let err = backend.acquire(&name, &short).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("1s"), "names the minimum: {err}");
    let odd = AcquireOptions::new()
        .ttl(Duration::from_millis(1500))
        .wait(Wait::No);
    let guard = backend.acquire(&name, &odd).await.expect("lock");
    assert_eq!(guard.ttl(), Duration::from_secs(2));
    guard.release().await.expect("release");
}

#[tokio::test]
async fn an_acquire_through_a_flapping_link_ends_within_wait_plus_request_timeout() {
    let cluster = support::start_cluster(1).await;
    let (proxy, flapping) = support::behind_proxy(&cluster, config).await;
    let holder = support::backend(&cluster).await;
    let held = holder.lock("bound/acquire").await.expect("lock");
    let txns = support::txns_started(&cluster).await;

    // The link is down when the acquire starts and comes back 600 ms later:
    // granting the lease succeeds only then, after several attempts.
    proxy.cut();
    let wait = Duration::from_millis(100);
    let start = Instant::now();
    let acquiring = tokio::spawn(async move { flapping.lock_timeout("bound/acquire", wait).await });
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Slow enough that the answer to the Txn is still on its way when the
    // link goes down again, as soon as that Txn reached etcd.
    proxy.delay(Duration::from_millis(50));
    proxy.restore();
    timeout(REQUEST_TIMEOUT + SLACK, async {
        while support::txns_started(&cluster).await <= txns {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the acquire sends its Txn once the link is back");
    proxy.cut();

    let err = timeout(REQUEST_TIMEOUT * 4, acquiring)
        .await
        .expect("the acquire must end")
        .unwrap()
        .expect_err("the lock is held, and the link is down");
    let elapsed = start.elapsed();
    assert!(err.is_retryable(), "{err}");
    assert!(
        elapsed <= wait + REQUEST_TIMEOUT + Duration::from_millis(300),
        "an acquire with wait {wait:?} and request timeout {REQUEST_TIMEOUT:?} took {elapsed:?}: {err}"
    );
    held.release().await.expect("release");
}
