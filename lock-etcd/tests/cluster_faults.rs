//! Contention on a real 3-member cluster while its leader is SIGKILLed and
//! restarted: never two holders, tokens only go up, and acquisitions go on
//! once the cluster has recovered.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use lock_core::DynLockBackend;
use lock_etcd::EtcdBackend;
use lock_testkit::workload::{ClientFactory, Progress, WorkloadConfig, run_workload};
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
    let cluster = common::start_cluster(3).await;
    let endpoints = cluster.endpoints();
    let factory: ClientFactory = Arc::new(move || {
        let config = common::config_for(endpoints.clone());
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
