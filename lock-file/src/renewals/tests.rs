//! A panic in the renewal lane loses the lease it was renewing and nothing
//! else: the worker's slot comes back and the other leases keep renewing.

use std::sync::Mutex;
use std::time::Duration;

use distlock_core::{LockBackendExt, LockName, LostReason};

use super::*;
use crate::backend::FileBackend;
use crate::case::Case;
use crate::config::FileConfig;
use crate::keys::Space;

/// Test-only points where the lane can be made to panic, per lock record.
pub(super) mod hook {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    use super::super::Job;
    use crate::keys::LockPaths;

    /// Records whose renewal panics (inside the per-renewal work).
    pub(in super::super) static RENEWALS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    /// Records whose batch panics its worker (outside the per-renewal work).
    pub(in super::super) static BATCHES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    fn listed(list: &Mutex<Vec<PathBuf>>, record: &Path) -> bool {
        list.lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|r| r == record)
    }

    pub(in super::super) fn renewal(paths: &LockPaths) {
        if listed(&RENEWALS, &paths.record) {
            panic!(
                "test hook: the renewal of {} panics",
                paths.record.display()
            );
        }
    }

    pub(in super::super) fn batch(batch: &[Job]) {
        if let Some(job) = batch.iter().find(|j| listed(&BATCHES, &j.paths.record)) {
            panic!(
                "test hook: the worker renewing {} panics",
                job.paths.record.display()
            );
        }
    }
}

fn add(list: &Mutex<Vec<PathBuf>>, record: PathBuf) {
    list.lock().unwrap().push(record);
}

/// Waits (bounded) until `lane` counts `n` workers.
async fn workers_become(lane: &RenewalLane, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while lane.workers() != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lane counts {} workers, not {n}, 5 s on",
            lane.workers()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Locks whose renewals panic are lost with a reason that says so, within
/// two TTLs; more of them than the lane has threads, so a panic that kept
/// its thread's slot would leave no thread for the healthy locks, which are
/// still held (so renewed) three TTLs later.
#[tokio::test]
async fn a_panicking_renewal_loses_its_lease_and_the_others_keep_renewing() {
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_millis(600);
    let config = FileConfig::new(dir.path())
        .with_default_ttl(ttl)
        .with_fsync(false);
    let backend = FileBackend::connect(config).await.unwrap();
    let mut doomed = Vec::new();
    for i in 0..WORKERS + 4 {
        let name = LockName::new(format!("doomed/{i}")).unwrap();
        add(&hook::RENEWALS, backend.paths(Space::Lock, &name).record);
        doomed.push(backend.lock(name.as_str()).await.unwrap());
    }
    let mut healthy = Vec::new();
    for i in 0..3 {
        healthy.push(backend.lock(&format!("healthy/{i}")).await.unwrap());
    }
    for guard in &doomed {
        let reason = tokio::time::timeout(ttl * 2, guard.lost())
            .await
            .unwrap_or_else(|_| panic!("{} not lost within two TTLs", guard.name()));
        assert!(
            matches!(&reason, LostReason::RenewalFailed(why) if why.contains("panicked")),
            "{}: {reason:?}",
            guard.name()
        );
        assert!(
            !guard.is_held(),
            "{} still held after {reason:?}",
            guard.name()
        );
    }
    tokio::time::sleep(ttl * 3).await;
    for guard in healthy {
        assert!(guard.is_held(), "{}: {:?}", guard.name(), guard.health());
        guard.release().await.unwrap();
    }
}

/// A worker that panics outside a renewal gives its slot back: more such
/// panics than the lane has threads, and the lane still answers.
#[tokio::test]
async fn a_worker_that_panics_gives_its_slot_back() {
    let dir = tempfile::tempdir().unwrap();
    let lane = RenewalLane::new(false);
    let paths = |name: &str| {
        let name = LockName::new(name).unwrap();
        LockPaths::new(dir.path(), Space::Lock, &name, Case::Sensitive)
    };
    let submit = |paths: LockPaths| {
        let bound = Bound::within(Duration::from_secs(5));
        lane.submit(paths, "holder".to_owned(), 1_000, bound)
    };
    let crashing = paths("crashing");
    add(&hook::BATCHES, crashing.record.clone());
    for round in 0..WORKERS + 4 {
        let answer = tokio::time::timeout(Duration::from_secs(5), submit(crashing.clone()))
            .await
            .unwrap_or_else(|_| panic!("round {round}: no answer within 5 s"));
        assert!(answer.is_err(), "round {round}: answered {answer:?}");
        workers_become(&lane, 0).await;
    }
    let answer = tokio::time::timeout(Duration::from_secs(5), submit(paths("healthy")))
        .await
        .expect("the lane answers within 5 s");
    assert!(matches!(answer, Ok(Answer::Done(_))), "{answer:?}");
}
