//! Keepalive: every lease of a backend renews on one shared gRPC stream.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt, LockGuard, LostReason};
use distlock_etcd::EtcdBackend;
use distlock_testkit::servers::EtcdCluster;
use futures::future::join_all;
use tokio::time::{sleep, timeout};

const SLACK: Duration = Duration::from_secs(3);

/// LeaseKeepAlive streams member 0 has started so far, from its metrics.
async fn keepalive_streams_started(cluster: &EtcdCluster) -> f64 {
    keepalive_streams(cluster, "grpc_server_started_total").await
}

/// LeaseKeepAlive streams member 0 has seen end so far.
async fn keepalive_streams_ended(cluster: &EtcdCluster) -> f64 {
    keepalive_streams(cluster, "grpc_server_handled_total").await
}

/// Member 0's `metric` for the LeaseKeepAlive method.
async fn keepalive_streams(cluster: &EtcdCluster, metric: &str) -> f64 {
    cluster
        .member(0)
        .metric(metric, &[r#"grpc_method="LeaseKeepAlive""#])
        .await
        .expect("read etcd metrics")
}

/// `count` locks held by `backend`, each on a lease of its own.
async fn hold(backend: &EtcdBackend, prefix: &str, count: usize) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(count);
    for i in 0..count {
        guards.push(
            backend
                .lock(format!("{prefix}/{i}").as_str())
                .await
                .expect("lock"),
        );
    }
    guards
}

fn assert_all_held(guards: &[LockGuard]) {
    for guard in guards {
        assert!(
            guard.is_held(),
            "{} was lost: {:?}",
            guard.key(),
            guard.lost_signal().reason()
        );
    }
}

#[tokio::test]
async fn fifty_leases_renew_on_one_keepalive_stream() {
    let cluster = support::start_cluster(1).await;
    // 2 s: renewal attempts get 666 ms, so a slow moment of a loaded
    // machine does not reset the stream.
    let ttl = Duration::from_secs(2);
    let config = support::config_for(cluster.endpoints()).with_default_ttl(ttl);
    let backend = EtcdBackend::connect(config).await.expect("connect");
    let before = keepalive_streams_started(&cluster).await;

    let guards = hold(&backend, "shared-stream", 50).await;
    // Two TTLs: every lease renews about six times (every TTL / 3).
    sleep(ttl * 2).await;
    assert_all_held(&guards);
    for guard in &guards {
        guard.renew().await.expect("renew");
    }

    let streams = keepalive_streams_started(&cluster).await - before;
    assert!(
        (1.0..=3.0).contains(&streams),
        "50 leases of one backend opened {streams} LeaseKeepAlive streams; one shared stream \
         (or a new one after a reset or two) was expected"
    );
    join_all(guards.into_iter().map(LockGuard::release))
        .await
        .into_iter()
        .collect::<distlock_core::Result<Vec<()>>>()
        .expect("release");

    // Dropping the backend ends its keepalive stream.
    drop(backend);
    let ended = async {
        while keepalive_streams_ended(&cluster).await < keepalive_streams_started(&cluster).await {
            sleep(Duration::from_millis(50)).await;
        }
    };
    timeout(SLACK, ended)
        .await
        .expect("the keepalive stream ends when the backend is dropped");
}

#[tokio::test]
async fn a_lease_revoked_from_outside_fires_only_its_own_lost_signal() {
    let cluster = support::start_cluster(1).await;
    let backend = support::backend(&cluster).await;
    let guards = hold(&backend, "revoked-one", 5).await;
    // Let the shared stream open and carry a few renewals first.
    sleep(support::TTL).await;

    support::revoke_lease_of(&cluster, guards[2].key()).await;
    let reason = timeout(support::TTL + SLACK, guards[2].lost())
        .await
        .expect("the revoked lease's lost signal fires");
    assert!(!matches!(reason, LostReason::Released), "{reason}");
    let renewed = guards[2].renew().await;
    distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::LeaseLost, ErrorKind::NotHeld],
        "renewing a revoked lease",
        renewed,
    );

    // The others keep renewing on the same stream, for several TTLs.
    sleep(support::TTL * 3).await;
    for (i, guard) in guards.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert!(
            guard.is_held(),
            "lock {i} was lost with lock 2: {:?}",
            guard.lost_signal().reason()
        );
        guard.renew().await.expect("renew");
    }
}

#[tokio::test]
async fn a_hung_keepalive_stream_is_replaced_once() {
    let cluster = support::start_cluster(1).await;
    // A long TTL, so the locks outlive the partition below; renewal
    // attempts time out after the request timeout (2 s).
    let (proxy, backend) = support::behind_proxy(&cluster, |endpoints| {
        support::config_for(endpoints).with_default_ttl(Duration::from_secs(10))
    })
    .await;
    let guards = hold(&backend, "hung", 3).await;
    for guard in &guards {
        guard
            .renew()
            .await
            .expect("a renewal opens the keepalive stream");
    }
    let before = keepalive_streams_started(&cluster).await;

    // Renewals on a silent connection time out...
    proxy.blackhole();
    let hung = join_all(guards.iter().map(|g| timeout(SLACK * 2, g.renew()))).await;
    for renewed in hung {
        let err = renewed
            .expect("a renewal on a silent stream must time out")
            .expect_err("no answer through the blackhole");
        assert!(
            matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
            "{err}"
        );
    }
    proxy.restore();

    // ...and the next ones run on one new stream.
    for guard in &guards {
        guard.renew().await.expect("renew after the partition");
    }
    assert_all_held(&guards);
    let streams = keepalive_streams_started(&cluster).await - before;
    assert_eq!(
        streams, 1.0,
        "three renewals timed out on one stream: exactly one new stream was expected"
    );
}
