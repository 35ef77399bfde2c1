//! Contention benchmark: the file backend against the in-memory backend
//! (the baseline, measured in the same run) with the distlock-testkit workload.
//!
//! Run with `cargo bench -p distlock-file --bench contention`. Set `BENCH_SECS` to
//! change the duration of each run (default 5).

use std::sync::Arc;
use std::time::Duration;

use distlock_core::DynLockBackend;
use distlock_core::memory::MemoryBackend;
use distlock_file::{FileBackend, FileConfig};
use distlock_testkit::workload::{ClientFactory, Progress, WorkloadConfig, run_workload};
use futures::FutureExt;

#[tokio::main]
async fn main() {
    let secs = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let memory = MemoryBackend::new();
    let memory_factory: ClientFactory = Arc::new(move || {
        let m = memory.clone();
        async move { Ok(Arc::new(m) as Arc<DynLockBackend>) }.boxed()
    });
    let file_factory = |fsync: bool| -> ClientFactory {
        let path = dir.path().join(if fsync { "fsync" } else { "nofsync" });
        Arc::new(move || {
            let config = FileConfig::new(&path).with_fsync(fsync);
            async move {
                let backend = FileBackend::connect(config).await?;
                Ok(Arc::new(backend) as Arc<DynLockBackend>)
            }
            .boxed()
        })
    };
    println!(
        "| backend | clients | locks | acquisitions/s | vs memory | p50 wait | p99 wait | max wait | fairness | violations |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (clients, locks) in [(1, 1), (8, 1), (8, 8)] {
        let config = WorkloadConfig {
            clients,
            locks,
            duration: Duration::from_secs(secs),
            name_prefix: format!("bench-{clients}-{locks}"),
            primitive: Default::default(),
            ..WorkloadConfig::default()
        };
        let mut baseline = None;
        for (label, factory) in [
            ("memory", memory_factory.clone()),
            ("file", file_factory(true)),
            ("file fsync=false", file_factory(false)),
        ] {
            let report = run_workload(&config, factory, Arc::new(Progress::default()))
                .await
                .expect("workload");
            let base = *baseline.get_or_insert(report.per_second);
            println!(
                "| {label} | {clients} | {locks} | {:.0} | {:.3} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} | {} |",
                report.per_second,
                report.per_second / base,
                report.wait.p50_us as f64 / 1000.0,
                report.wait.p99_us as f64 / 1000.0,
                report.wait.max_us as f64 / 1000.0,
                report.fairness,
                report.violations + report.token_regressions,
            );
        }
    }
}
