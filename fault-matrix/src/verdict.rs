//! The verdicts: what fails a trial, and how a cell's trials add up.
//!
//! A trial fails on what matters to a user of the lock, not on what the
//! library says about itself:
//!
//! - two clients inside at once with no fault, on any backend;
//! - on strong-token backends (etcd, ZooKeeper) and under the mutants: a
//!   fenced violation, a token regression, a vouched stale write (except
//!   when the lock is broken from outside, which no client can see
//!   coming), or a lost signal that fired only after another client was
//!   granted the lock while the holder kept running;
//! - a client that crashed or hung;
//! - no grant to anyone after a client was killed (fault 10);
//! - a history the checker finds not linearizable, where the row's
//!   verdicts are strict (or with no fault), except a lock broken from
//!   outside.
//!
//! One documented server bug is reported as a known failure, decided from
//! what the server showed: on `etcd-3` with its leader frozen, a lease
//! that a healthy member saw end before its TTL could have run out.

use super::cell::{Cell, Spread};
use super::faults::Fault;
use super::row::Row;

/// One trial of a cell: its measurement, or why it could not run.
#[derive(Debug, Clone)]
pub struct Trial {
    /// Its number in the cell, from 0.
    pub index: u32,
    /// The seed it drew its timing, victim and fault length from.
    pub seed: u64,
    /// The measurement.
    pub outcome: Result<Cell, String>,
    /// Whether a healthy member showed the victim's lease end before its
    /// TTL could have run out (etcd's revocation by a resumed leader).
    pub server_revoked_lease: bool,
}

/// What a trial showed: failures, and failures the server's own bug
/// explains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// What fails the trial (or, in the broken and mutant rows, detects).
    pub failing: Vec<String>,
    /// What a documented server bug explains.
    pub known: Vec<String>,
}

/// Whether the victim keeps running through `fault` while the servers can
/// end its lease, so that its lost signal must fire before anyone else is
/// granted the lock: the partition, slow network, leader and member
/// faults, and a paused server the victim talks to. A paused victim
/// learns on waking; a lock broken from outside is
/// learnt after the next grant; after every server restarts the next grant
/// may come the moment they are back.
fn victim_runs_through(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::PartitionHolder
            | Fault::SlowNetwork
            | Fault::KillLeader
            | Fault::FreezeMember
            | Fault::IsolateFollower
            | Fault::PauseServer
    )
}

/// Whether a trial of `row` under `fault` met the documented
/// etcd bug: a leader frozen, then resumed, revokes leases a healthy member
/// was keeping alive (etcd 3.4.23; upstream etcd issue 15247).
fn known_server_bug(row: Row, fault: Fault, server_revoked_lease: bool) -> bool {
    row == Row::Etcd3 && fault == Fault::FreezeMember && server_revoked_lease
}

/// Judges one measured trial.
pub fn judge(row: Row, fault: Fault, cell: &Cell, server_revoked_lease: bool) -> Findings {
    let mut f = Findings::default();
    let strict = row.strong_tokens() || row.mutant().is_some();
    let known_bug = known_server_bug(row, fault, server_revoked_lease);
    if fault == Fault::None && cell.overlaps > 0 {
        f.failing.push(format!(
            "{} overlaps with no fault: two clients inside at once",
            cell.overlaps
        ));
    }
    if strict && cell.fenced_violations > 0 {
        f.failing
            .push(format!("{} fenced violations", cell.fenced_violations));
    }
    if strict && cell.token_regressions > 0 {
        f.failing
            .push(format!("{} token regressions", cell.token_regressions));
    }
    if strict && fault != Fault::BreakLock && cell.vouched_stale_writes > 0 {
        let text = format!(
            "{} vouched stale writes: is_held() said yes after another client was granted a \
             higher token",
            cell.vouched_stale_writes
        );
        if known_bug {
            f.known.push(text);
        } else {
            f.failing.push(text);
        }
    }
    if strict && victim_runs_through(fault) && cell.late_lost_signals > 0 {
        let text = format!(
            "{} lost signals fired only after another client was granted the lock while its \
             holder kept running",
            cell.late_lost_signals
        );
        if known_bug {
            f.known.push(text);
        } else {
            f.failing.push(text);
        }
    }
    if (strict || fault == Fault::None)
        && fault != Fault::BreakLock
        && cell.history_not_linearizable > 0
    {
        let text = format!(
            "history not linearizable: {}",
            cell.history_verdict.as_deref().unwrap_or("")
        );
        if known_bug {
            f.known.push(text);
        } else {
            f.failing.push(text);
        }
    }
    if fault == Fault::KillClient && cell.recovery_ms.is_none() {
        f.failing.push(
            "no other client was granted the lock after a client was killed: a dead \
             client's lock or place in the queue was never freed"
                .to_owned(),
        );
    }
    if cell.crashed_clients > 0 {
        f.failing
            .push(format!("{} client processes crashed", cell.crashed_clients));
    }
    if cell.hung_clients > 0 {
        f.failing
            .push(format!("{} client processes hung", cell.hung_clients));
    }
    f
}

/// Adds up a cell's trials: counts summed, delays pooled, the worst
/// recovery, and the verdict.
pub fn merge(row: Row, fault: Fault, seed: u64, trials: Vec<Trial>) -> Cell {
    let n = trials.len() as u32;
    let mut cell: Option<Cell> = None;
    let mut failures = 0;
    let mut known_failures = 0;
    let mut detected = false;
    let mut problems = Vec::new();
    let mut unrun = Vec::new();
    for trial in trials {
        let at = format!("trial {} (seed {:#x})", trial.index, trial.seed);
        let measured = match trial.outcome {
            Ok(measured) => measured,
            Err(why) => {
                failures += 1;
                problems.push(format!("{at}: could not run: {why}"));
                unrun.push(why);
                continue;
            }
        };
        let findings = judge(row, fault, &measured, trial.server_revoked_lease);
        let harness = measured.crashed_clients + measured.hung_clients > 0;
        if row.must_be_caught() && !findings.failing.is_empty() {
            detected = true;
            if harness {
                failures += 1;
            }
        } else if !findings.failing.is_empty() {
            failures += 1;
        } else if !findings.known.is_empty() {
            known_failures += 1;
        }
        for text in findings.failing.iter().chain(&findings.known) {
            problems.push(format!("{at}: {text}"));
        }
        cell = Some(match cell {
            None => measured,
            Some(sum) => add(sum, measured),
        });
    }
    let Some(mut cell) = cell else {
        let mut cell = Cell::empty(row, fault, "failed", unrun.first().cloned());
        cell.trials = n;
        cell.failures = failures;
        cell.seed = seed;
        cell.problems = problems;
        return cell;
    };
    cell.lost_signal_delay_ms = Spread::of(cell.lost_delays.clone());
    let checked = cell.history_events > 0 || cell.history_verdict.is_some();
    cell.history_verdict = checked.then(|| {
        let (bad, unknown) = (cell.history_not_linearizable, cell.history_unknown);
        if bad > 0 {
            format!("not linearizable in {bad} of {n} trials")
        } else if unknown > 0 {
            format!(
                "linearizable in {} of {n} trials, undecided in {unknown}",
                n - unknown
            )
        } else {
            format!("linearizable in all {n} trials")
        }
    });
    cell.trials = n;
    cell.failures = failures;
    cell.known_failures = known_failures;
    cell.seed = seed;
    cell.problems = problems;
    cell.verdict = if row.must_be_caught() {
        cell.detected = Some(detected);
        if failures > 0 {
            "fail"
        } else if detected {
            "detected"
        } else {
            "undetected"
        }
    } else if failures > 0 {
        "fail"
    } else if known_failures > 0 {
        "known-failure"
    } else {
        "pass"
    }
    .to_owned();
    cell
}

/// Two trials' measurements as one.
fn add(mut sum: Cell, t: Cell) -> Cell {
    sum.duration_ms += t.duration_ms;
    sum.acquisitions += t.acquisitions;
    sum.overlaps += t.overlaps;
    sum.sections_overlapped += t.sections_overlapped;
    sum.stale_rejected += t.stale_rejected;
    sum.fenced_violations += t.fenced_violations;
    sum.token_regressions += t.token_regressions;
    sum.writes_after_loss_seen += t.writes_after_loss_seen;
    sum.vouched_stale_writes += t.vouched_stale_writes;
    sum.history_events += t.history_events;
    sum.history_not_linearizable += t.history_not_linearizable;
    sum.history_unknown += t.history_unknown;
    sum.held_writes_rejected += t.held_writes_rejected;
    sum.crashed_clients += t.crashed_clients;
    sum.hung_clients += t.hung_clients;
    sum.lost_signals += t.lost_signals;
    sum.lost_delays.extend(t.lost_delays);
    sum.late_lost_signals += t.late_lost_signals;
    sum.late_lost_revoked += t.late_lost_revoked;
    sum.recovery_ms = match (sum.recovery_ms, t.recovery_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    sum.stuck_clients += t.stuck_clients;
    sum.stuck_window_ms = sum.stuck_window_ms.min(t.stuck_window_ms);
    for (k, v) in t.errors {
        *sum.errors.entry(k).or_default() += v;
    }
    for note in t.notes {
        if !sum.notes.contains(&note) && sum.notes.len() < 8 {
            sum.notes.push(note);
        }
    }
    sum.victim = t.victim.or(sum.victim);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(row: Row, fault: Fault) -> Cell {
        Cell::empty(row, fault, "measured", None)
    }

    #[test]
    fn an_overlap_without_a_fault_fails_every_real_row_and_detects_the_broken_one() {
        for row in [Row::File, Row::Redis, Row::Etcd] {
            let mut cell = measured(row, Fault::None);
            cell.overlaps = 1;
            assert_eq!(judge(row, Fault::None, &cell, false).failing.len(), 1);
        }
        let mut cell = measured(Row::Broken, Fault::None);
        cell.overlaps = 3;
        let trial = Trial {
            index: 0,
            seed: 1,
            outcome: Ok(cell),
            server_revoked_lease: false,
        };
        let merged = merge(Row::Broken, Fault::None, 1, vec![trial]);
        assert_eq!(merged.verdict, "detected");
        assert_eq!(merged.failures, 0);
    }

    #[test]
    fn a_vouched_stale_write_fails_strong_rows_only_and_is_known_only_when_the_server_showed_it() {
        let mut cell = measured(Row::Etcd3, Fault::FreezeMember);
        cell.vouched_stale_writes = 2;
        assert_eq!(
            judge(Row::Etcd3, Fault::FreezeMember, &cell, false)
                .failing
                .len(),
            1
        );
        let known = judge(Row::Etcd3, Fault::FreezeMember, &cell, true);
        assert!(known.failing.is_empty() && known.known.len() == 1);
        let zk = judge(Row::Zk3, Fault::FreezeMember, &cell, true);
        assert_eq!(zk.failing.len(), 1, "the exemption is etcd-3's alone");
        assert!(
            judge(Row::Redis, Fault::FreezeMember, &cell, false)
                .failing
                .is_empty()
        );
        let trial = Trial {
            index: 0,
            seed: 1,
            outcome: Ok(cell),
            server_revoked_lease: true,
        };
        let merged = merge(Row::Etcd3, Fault::FreezeMember, 1, vec![trial]);
        assert_eq!(
            (merged.verdict.as_str(), merged.known_failures),
            ("known-failure", 1)
        );
    }

    #[test]
    fn a_trial_that_could_not_run_is_a_failure() {
        let trial = Trial {
            index: 0,
            seed: 1,
            outcome: Err("no holder".into()),
            server_revoked_lease: false,
        };
        let merged = merge(Row::Zk, Fault::PauseHolder, 1, vec![trial]);
        assert_eq!((merged.status.as_str(), merged.failures), ("failed", 1));
    }
}
