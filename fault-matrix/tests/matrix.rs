//! The fault matrix's detector must be able to fail: against a lock that
//! excludes nobody it reports overlaps and fenced violations; against a
//! real lock at rest it reports none; a paused holder shows an overlap
//! that the fenced view rejects; a mutant whose lost signal never fires is
//! caught by its vouched stale writes; clients holding many names at once
//! are judged per name.

use std::path::PathBuf;

use fault_matrix::{Cell, Contended, Fault, Plan, Row, run_row};

fn plan() -> Plan {
    Plan::quick(PathBuf::from(env!("CARGO_BIN_EXE_fault-matrix-client")))
}

async fn cells(row: Row, faults: &[Fault]) -> Vec<Cell> {
    let logs = tempfile::tempdir().unwrap();
    run_row(row, faults, &plan(), &logs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_detector_fires_on_a_lock_that_excludes_nobody() {
    let cell = &cells(Row::Broken, &[Fault::None]).await[0];
    assert_eq!(cell.status, "measured", "{cell:?}");
    assert!(cell.overlaps > 0, "{cell:?}");
    assert!(cell.fenced_violations > 0, "{cell:?}");
    assert!(cell.token_regressions > 0, "{cell:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_file_lock_holder_overlaps_unfenced_and_is_rejected_fenced() {
    let cells = cells(Row::File, &[Fault::None, Fault::PauseHolder]).await;
    let (calm, paused) = (&cells[0], &cells[1]);
    assert_eq!(calm.status, "measured", "{calm:?}");
    assert_eq!((calm.overlaps, calm.fenced_violations), (0, 0), "{calm:?}");
    assert!(calm.acquisitions >= 4, "{calm:?}");
    assert_eq!(paused.status, "measured", "{paused:?}");
    assert!(
        paused.overlaps > 0,
        "the paused holder's end write lands late: {paused:?}"
    );
    assert!(
        paused.stale_rejected > 0,
        "the fenced view rejects it: {paused:?}"
    );
    assert_eq!(paused.fenced_violations, 0, "{paused:?}");
    assert_eq!(paused.token_regressions, 0, "{paused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_cluster_row_starts_and_measures_contention() {
    let cell = &cells(Row::RedisCluster, &[Fault::None]).await[0];
    assert_eq!(cell.status, "measured", "{cell:?}");
    assert!(cell.acquisitions >= 4, "{cell:?}");
    assert_eq!(
        (
            cell.overlaps,
            cell.fenced_violations,
            cell.token_regressions
        ),
        (0, 0, 0),
        "{cell:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_lost_signal_never_fires_is_caught_after_a_pause() {
    let row = Row::MUTANTS[1];
    let cell = &cells(row, &[Fault::PauseHolder]).await[0];
    assert_eq!(cell.status, "measured", "{cell:?}");
    assert_eq!(cell.detected, Some(true), "{cell:?}");
    assert!(cell.vouched_stale_writes > 0, "{cell:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_holding_many_names_at_once_are_judged_name_by_name() {
    let plan = Plan {
        contended: Contended::Many,
        ..plan()
    };
    let logs = tempfile::tempdir().unwrap();
    let cells = run_row(Row::File, &[Fault::None, Fault::KillServer], &plan, &logs).await;
    let (calm, inapplicable) = (&cells[0], &cells[1]);
    assert_eq!(calm.backend, "file/many-names", "{calm:?}");
    assert_eq!(calm.verdict, "pass", "{calm:?}");
    assert_eq!((calm.overlaps, calm.token_regressions), (0, 0), "{calm:?}");
    assert!(calm.acquisitions >= 4, "{calm:?}");
    assert_eq!(inapplicable.status, "inapplicable", "{inapplicable:?}");
}
