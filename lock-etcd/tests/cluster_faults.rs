//! Contention on a real 3-member cluster while its leader is SIGKILLed and
//! restarted: never two holders, tokens only go up, and acquisitions go on
//! once the cluster has recovered.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use distlock_core::{DynLockBackend, LockBackendExt};
use distlock_etcd::EtcdBackend;
use distlock_testkit::workload::{ClientFactory, Progress, WorkloadConfig, run_workload};
use futures::FutureExt;
use tokio::time::timeout;

/// Long enough that no lease expires while the cluster elects a new leader.
const TTL: Duration = Duration::from_secs(5);

/// Waits until `progress` counts `more` acquisitions beyond now.
async fn acquisitions_continue(progress: &Progress, more: u64, within: Duration, what: &str) {
    let target = progress.acquisitions.load(Ordering::Relaxed) + more;
    let waited = timeout(within, async {
        while progress.acquisitions.load(Ordering::Relaxed) < target {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{what}: fewer than {more} acquisitions within {within:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_survives_leader_kill_and_restart() {
    let cluster = support::start_cluster(3).await;
    let endpoints = cluster.endpoints();
    let factory: ClientFactory = Arc::new(move || {
        let config = support::config_for(endpoints.clone());
        async move {
            let backend = EtcdBackend::connect(config).await?;
            Ok(Arc::new(backend) as Arc<DynLockBackend>)
        }
        .boxed()
    });
    let config = WorkloadConfig {
        clients: 4,
        locks: 1,
        duration: Duration::from_secs(12),
        ttl: Some(TTL),
        hold: Duration::ZERO,
        name_prefix: "cluster/faults".into(),
        primitive: Default::default(),
    };
    let progress = Arc::new(Progress::default());
    let run = tokio::spawn({
        let progress = progress.clone();
        async move { run_workload(&config, factory, progress).await }
    });

    acquisitions_continue(&progress, 50, Duration::from_secs(10), "before the fault").await;
    let leader = cluster
        .leader_index()
        .await
        .expect("the cluster has a leader");
    cluster.member(leader).kill().await;
    acquisitions_continue(
        &progress,
        20,
        Duration::from_secs(8),
        "with the leader dead",
    )
    .await;
    cluster
        .member(leader)
        .restart()
        .await
        .expect("restart the old leader");
    acquisitions_continue(&progress, 20, Duration::from_secs(8), "after the restart").await;

    let report = timeout(Duration::from_secs(30), run)
        .await
        .expect("the workload ends on time")
        .expect("workload task")
        .expect("workload");
    assert_eq!(report.violations, 0, "two holders at once: {report:?}");
    assert_eq!(report.token_regressions, 0, "a token went back: {report:?}");
    assert!(report.acquisitions > 90, "{report:?}");
    eprintln!(
        "{} acquisitions, {} errors during the fault (first: {:?})",
        report.acquisitions, report.errors, report.first_error
    );
}

/// Watchers registered on each member, from their metrics.
async fn watchers_per_member(cluster: &distlock_testkit::servers::EtcdCluster) -> Vec<f64> {
    let mut counts = Vec::new();
    for member in cluster.members() {
        counts.push(
            member
                .metric("etcd_debugging_mvcc_watcher_total", &[])
                .await
                .expect("read etcd metrics"),
        );
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_watch_member_freezes_still_acquires() {
    const WAITER_TTL: Duration = Duration::from_secs(3);
    let cluster = support::start_cluster(3).await;
    let config = || support::config_for(cluster.endpoints()).with_default_ttl(WAITER_TTL);
    let holder = EtcdBackend::connect(config()).await.expect("connect");
    let waiter = EtcdBackend::connect(config()).await.expect("connect");
    let held = holder.lock("frozen/watch").await.expect("lock");
    // The holder's monitor watch is in place before counting.
    let before = timeout(Duration::from_secs(3), async {
        loop {
            let counts = watchers_per_member(&cluster).await;
            if counts.iter().sum::<f64>() >= 1.0 {
                return counts;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the holder's monitor watches its key");

    let waiting = tokio::spawn(async move {
        waiter
            .lock_timeout("frozen/watch", Duration::from_secs(30))
            .await
    });
    // Find the member carrying the waiter's watch, and freeze it.
    let frozen = timeout(Duration::from_secs(3), async {
        loop {
            let counts = watchers_per_member(&cluster).await;
            if let Some(m) = (0..counts.len()).find(|&m| counts[m] > before[m]) {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the waiter watches its predecessor");
    cluster.member(frozen).pause();

    held.release().await.expect("release on the other members");
    let next = timeout(WAITER_TTL * 2, waiting)
        .await
        .expect("the waiter must acquire within 2×TTL although its watch went silent")
        .unwrap()
        .expect("lock");
    cluster.member(frozen).resume();
    next.release().await.expect("release");
}
