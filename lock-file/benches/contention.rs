//! Contention benchmark: the file backend against the in-memory backend
//! (the baseline, measured in the same run) with the distlock-testkit workload.
//!
//! Run with `cargo bench -p distlock-file --bench contention`. Set `BENCH_SECS` to
//! change the duration of each run (default 5).
//!
//! With one lock, the file backend's hand-offs are also set against the
//! floor the file system sets: before and after each run, the bench
//! replaces a small record in the lock directory as lock-file does (write
//! a scratch file, `fsync` it, `rename` it over the record, `fsync` the
//! directory; with `fsync=false` only the write and the `rename`), and the
//! floor is `1 / p50` of that, one durable record write per hand-off.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::DynLockBackend;
use distlock_core::memory::MemoryBackend;
use distlock_file::{FileBackend, FileConfig};
use distlock_testkit::floor::{self, Floor};
use distlock_testkit::handoffs::Handoffs;
use distlock_testkit::workload::{ClientFactory, Progress, WorkloadConfig, run_workload};
use futures::FutureExt;

const SYNCED: &str = "record write + fsync + rename + directory fsync";
const UNSYNCED: &str = "record write + rename";
/// Timed record writes per run.
const FLOOR_SAMPLES: usize = 50;

/// Times `n` replacements of a record in `dir`, made as lock-file makes
/// them with `fsync` on or off.
fn sample_floor(dir: &Path, fsync: bool, floor: &mut Floor, n: usize) -> io::Result<()> {
    let (tmp, record) = (dir.join("floor.rec.tmp"), dir.join("floor.rec"));
    let bytes = [b'x'; 160];
    for _ in 0..n {
        let start = Instant::now();
        let mut scratch = File::create(&tmp)?;
        scratch.write_all(&bytes)?;
        if fsync {
            scratch.sync_all()?;
        }
        drop(scratch);
        fs::rename(&tmp, &record)?;
        if fsync {
            File::open(dir)?.sync_all()?;
        }
        floor.record(if fsync { SYNCED } else { UNSYNCED }, start.elapsed());
    }
    Ok(())
}

/// Samples the floor with `fsync` on or off into its place in `floors`, in
/// the record directory of the lock directory `root`.
fn sample_into(floors: &mut [Floor; 2], root: &Path, fsync: bool) {
    // The backend makes the directory on its first run; the floor may come first.
    let records = root.join("locks");
    fs::create_dir_all(&records).expect("lock directory");
    sample_floor(
        &records,
        fsync,
        &mut floors[usize::from(fsync)],
        FLOOR_SAMPLES,
    )
    .expect("floor record write");
}

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
    let lock_dir = |fsync: bool| dir.path().join(if fsync { "fsync" } else { "nofsync" });
    let file_factory = |fsync: bool| -> ClientFactory {
        let path = lock_dir(fsync);
        Arc::new(move || {
            let config = FileConfig::new(&path).with_fsync(fsync);
            async move {
                let backend = FileBackend::connect(config).await?;
                Ok(Arc::new(backend) as Arc<DynLockBackend>)
            }
            .boxed()
        })
    };
    let mut floors = [Floor::new(), Floor::new()];
    let mut floor_rows = Vec::new();
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
        for (label, factory, fsync) in [
            ("memory", memory_factory.clone(), None),
            ("file", file_factory(true), Some(true)),
            ("file fsync=false", file_factory(false), Some(false)),
        ] {
            // Before and after the run: the disk's latency drifts with the
            // machine's other writers.
            if let Some(fsync) = fsync {
                sample_into(&mut floors, &lock_dir(fsync), fsync);
            }
            let handoffs = Handoffs::new();
            let factory = handoffs.counting(factory, config.duration);
            let report = run_workload(&config, factory, Arc::new(Progress::default()))
                .await
                .expect("workload");
            if let Some(fsync) = fsync {
                sample_into(&mut floors, &lock_dir(fsync), fsync);
            }
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
            if let (Some(fsync), 1) = (fsync, locks) {
                let per_second = handoffs.total() as f64 / secs as f64;
                floor_rows.push((label, clients, per_second, fsync));
            }
        }
    }
    floor::print_section(
        "Against the hand-off floor (one lock, hand-offs between clients; floor timed before and after each run)",
        &floor_rows
            .into_iter()
            .map(|(label, clients, per_second, fsync)| {
                floors[usize::from(fsync)].row(label, clients, per_second)
            })
            .collect::<Vec<_>>(),
        &[
            format!("fsync: {}", floors[1]),
            format!("fsync=false: {}", floors[0]),
        ],
    );
}
