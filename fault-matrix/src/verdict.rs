//! The verdicts: what fails a trial, and how a cell's trials add up.
//!
//! A trial fails on what matters to a user of the lock, not on what the
//! library says about itself:
//!
//! - two clients inside at once with no fault, on any backend;
//! - on strong-token backends (etcd, ZooKeeper, PostgreSQL, MySQL) and
//!   under the mutants: a fenced violation, a token regression, a vouched stale
//!   write (except when the lock is broken from outside, which no client
//!   can see coming), or a lost signal that fired only after another
//!   client was granted the lock while the holder kept running;
//! - a client that crashed or hung;
//! - no grant to anyone after a client was killed (fault 10);
//! - a history the checker finds not linearizable, where the row's
//!   verdicts are strict (or with no fault), except a lock broken from
//!   outside.
//!
//! Where clients hold several names at once, each is judged on its own.
//!
//! One documented server bug is reported as a known failure, decided from
//! what the server showed and only for what it explains: on `etcd-3` with
//! its leader frozen, the resumed member expired leases and a healthy
//! member no longer has a client's lease. A vouched stale write or a late
//! lost signal is known only when it is that client's own hold's; an
//! overlap, when one of its two sections is such a hold; a history that
//! is not linearizable, only when every one of the trial's stale writes,
//! late signals and overlaps is so explained (and there is one). The rest
//! fails the trial: a client whose lease the server did not end early
//! has no excuse. Token regressions and fenced violations always fail.

use std::collections::BTreeSet;

use super::cell::{Anomaly, Attributed, Cell, Hold, Spread};
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
    /// The holds whose lease the servers showed ended early: the resumed
    /// member expired leases and a healthy member no longer has these
    /// (etcd's revocation by a resumed leader).
    pub revoked_early: Vec<Hold>,
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

/// Whether `row` under `fault` can meet the documented etcd bug: a leader
/// frozen, then resumed, revokes leases a healthy member was keeping alive
/// (etcd 3.4.23; upstream etcd issue 15247).
fn meets_server_bug(row: Row, fault: Fault) -> bool {
    row == Row::Etcd3 && fault == Fault::FreezeMember
}

/// How many of `cell`'s `anomaly`s the server's bug explains (one of
/// their holds was ended early), and how many it does not.
fn split(cell: &Cell, anomaly: Anomaly, explained: &impl Fn(&Attributed) -> bool) -> (u64, u64) {
    let of = cell.attributed.iter().filter(|a| a.anomaly == anomaly);
    let known = of.clone().filter(|a| explained(a)).count() as u64;
    (known, of.count() as u64 - known)
}

/// Files `count` findings described by `text(n)`: the explained ones as
/// known, the rest as failing.
fn file(f: &mut Findings, (known, failing): (u64, u64), text: impl Fn(u64) -> String) {
    if known > 0 {
        f.known.push(text(known));
    }
    if failing > 0 {
        f.failing.push(text(failing));
    }
}

/// Judges one measured trial; `revoked_early` are the holds whose lease
/// the servers showed ended early.
pub fn judge(row: Row, fault: Fault, cell: &Cell, revoked_early: &[Hold]) -> Findings {
    let mut f = Findings::default();
    let strict = row.strong_tokens() || row.mutant().is_some();
    let revoked: BTreeSet<Hold> = revoked_early.iter().copied().collect();
    let bug = meets_server_bug(row, fault);
    let explained = |a: &Attributed| bug && a.holds.iter().any(|h| revoked.contains(h));
    // The known share of `total` anomalies: those attributed to a hold
    // ended early; whatever is not attributed is explained by nothing.
    let split_of = |anomaly, total: u64| {
        let known = split(cell, anomaly, &explained).0.min(total);
        (known, total - known)
    };
    if fault == Fault::None && cell.overlaps > 0 {
        let n = cell.overlaps;
        f.failing.push(format!(
            "{n} {} with no fault: two clients inside at once",
            plural(n, "overlap", "overlaps")
        ));
    }
    if strict && cell.fenced_violations > 0 {
        let n = cell.fenced_violations;
        f.failing.push(format!(
            "{n} fenced {}",
            plural(n, "violation", "violations")
        ));
    }
    if strict && cell.token_regressions > 0 {
        let n = cell.token_regressions;
        f.failing.push(format!(
            "{n} token {}",
            plural(n, "regression", "regressions")
        ));
    }
    if strict && fault != Fault::BreakLock && cell.vouched_stale_writes > 0 {
        let counts = split_of(Anomaly::VouchedStaleWrite, cell.vouched_stale_writes);
        file(&mut f, counts, |n| {
            format!(
                "{n} vouched stale {}: is_held() said yes after another client was granted a \
                 higher token",
                plural(n, "write", "writes")
            )
        });
    }
    if strict && victim_runs_through(fault) && cell.late_lost_signals > 0 {
        let counts = split_of(Anomaly::LateLostSignal, cell.late_lost_signals);
        file(&mut f, counts, |n| {
            format!(
                "{n} lost {} fired only after another client was granted the lock while its \
                 holder kept running",
                plural(n, "signal", "signals")
            )
        });
    }
    if (strict || fault == Fault::None)
        && fault != Fault::BreakLock
        && cell.history_not_linearizable > 0
    {
        let text = format!(
            "history not linearizable: {}",
            cell.history_verdict.as_deref().unwrap_or("")
        );
        let blamed = &cell.attributed;
        if bug && !blamed.is_empty() && blamed.iter().all(explained) {
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
        let n = cell.crashed_clients;
        f.failing.push(format!(
            "{n} client {} crashed",
            plural(n, "process", "processes")
        ));
    }
    if cell.hung_clients > 0 {
        let n = cell.hung_clients;
        f.failing.push(format!(
            "{n} client {} hung",
            plural(n, "process", "processes")
        ));
    }
    f
}

/// `one` or `many` as `n` asks.
pub fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
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
        let findings = judge(row, fault, &measured, &trial.revoked_early);
        // A harness failure, or two checkers disagreeing, fails any row.
        let harness = measured.crashed_clients + measured.hung_clients > 0
            || !measured.disagreements.is_empty();
        if row.must_be_caught() && !findings.failing.is_empty() {
            detected = true;
            if harness {
                failures += 1;
            }
        } else if !findings.failing.is_empty() || harness {
            failures += 1;
        } else if !findings.known.is_empty() {
            known_failures += 1;
        }
        for text in findings
            .failing
            .iter()
            .chain(&findings.known)
            .chain(&measured.disagreements)
        {
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
    cell.history_verdict =
        checked.then(|| checker_verdict(cell.history_not_linearizable, cell.history_unknown, n));
    cell.second_verdict = cell.second_verdict.is_some().then(|| {
        let of = checker_verdict(cell.second_not_linearizable, cell.second_unknown, n);
        format!("{}: {of}", super::second::CHECKER)
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
/// One checker's verdict over a cell's `n` trials, `bad` of them not
/// linearizable and `unknown` undecided.
fn checker_verdict(bad: u32, unknown: u32, n: u32) -> String {
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
}

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
    sum.second_not_linearizable += t.second_not_linearizable;
    sum.second_unknown += t.second_unknown;
    sum.second_verdict = sum.second_verdict.or(t.second_verdict);
    sum.disagreements.extend(t.disagreements);
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

    fn hold(client: u32, token: u64) -> Hold {
        Hold { client, token }
    }

    /// A cell with one vouched stale write by each of `writers`.
    fn stale_writes_by(writers: &[Hold]) -> Cell {
        let mut cell = measured(Row::Etcd3, Fault::FreezeMember);
        cell.vouched_stale_writes = writers.len() as u64;
        for &writer in writers {
            cell.attributed.push(Attributed {
                anomaly: Anomaly::VouchedStaleWrite,
                holds: vec![writer],
            });
        }
        cell
    }

    /// The cell of one trial of `row` under `fault` that measured `cell`.
    fn merge_one(row: Row, fault: Fault, cell: Cell, revoked_early: Vec<Hold>) -> Cell {
        let trial = Trial {
            index: 0,
            seed: 1,
            outcome: Ok(cell),
            revoked_early,
        };
        merge(row, fault, 1, vec![trial])
    }

    #[test]
    fn an_overlap_without_a_fault_fails_every_real_row_and_detects_the_broken_one() {
        for row in [Row::File, Row::Redis, Row::Etcd] {
            let mut cell = measured(row, Fault::None);
            cell.overlaps = 1;
            let findings = judge(row, Fault::None, &cell, &[]);
            assert_eq!(findings.failing.len(), 1);
            assert!(
                findings.failing[0].starts_with("1 overlap with"),
                "{findings:?}"
            );
        }
        let mut cell = measured(Row::Broken, Fault::None);
        cell.overlaps = 3;
        let merged = merge_one(Row::Broken, Fault::None, cell, Vec::new());
        assert_eq!(merged.verdict, "detected");
        assert_eq!(merged.failures, 0);
    }

    #[test]
    fn a_vouched_stale_write_fails_strong_rows_only_and_is_known_only_when_the_server_showed_it() {
        let victim = hold(1, 40);
        let cell = stale_writes_by(&[victim, victim]);
        let failing = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[]);
        assert_eq!(failing.failing.len(), 1);
        let known = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert!(
            known.failing.is_empty() && known.known.len() == 1,
            "{known:?}"
        );
        let zk = judge(Row::Zk3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!(zk.failing.len(), 1, "the exemption is etcd-3's alone");
        assert!(
            judge(Row::Redis, Fault::FreezeMember, &cell, &[])
                .failing
                .is_empty()
        );
        let merged = merge_one(Row::Etcd3, Fault::FreezeMember, cell, vec![victim]);
        assert_eq!(
            (merged.verdict.as_str(), merged.known_failures),
            ("known-failure", 1)
        );
    }

    #[test]
    fn only_the_victims_revoked_lease_is_known_and_a_live_lease_making_stale_writes_fails() {
        let (victim, other) = (hold(1, 40), hold(2, 41));
        // The victim's lease ended early: its own stale write is known.
        let cell = stale_writes_by(&[victim]);
        let findings = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!((findings.known.len(), findings.failing.len()), (1, 0));
        // Another client, its lease alive, vouched for a stale write: the
        // bug explains nothing of it, whatever happened to the victim.
        let cell = stale_writes_by(&[victim, other]);
        let findings = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!(
            findings.known,
            ["1 vouched stale write: is_held() said yes after another \
             client was granted a higher token"]
        );
        assert_eq!(findings.failing.len(), 1, "{findings:?}");
        let merged = merge_one(Row::Etcd3, Fault::FreezeMember, cell, vec![victim]);
        assert_eq!((merged.verdict.as_str(), merged.failures), ("fail", 1));
    }

    #[test]
    fn two_waiters_inside_at_once_fail_though_the_victims_lease_was_revoked() {
        let (victim, a, b) = (hold(0, 40), hold(1, 41), hold(2, 42));
        let mut cell = measured(Row::Etcd3, Fault::FreezeMember);
        cell.history_not_linearizable = 1;
        cell.overlaps = 2;
        let overlap = |x, y| Attributed {
            anomaly: Anomaly::Overlap,
            holds: vec![x, y],
        };
        cell.attributed = vec![overlap(a, victim), overlap(b, a)];
        let findings = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!(findings.failing.len(), 1, "{findings:?}");
        // With only the overlap the victim's revocation explains, it is known.
        cell.attributed.pop();
        let findings = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!((findings.known.len(), findings.failing.len()), (1, 0));
        // A late signal of a client whose lease lived fails too.
        cell.late_lost_signals = 1;
        cell.attributed.push(Attributed {
            anomaly: Anomaly::LateLostSignal,
            holds: vec![a],
        });
        let findings = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!(findings.failing.len(), 2, "{findings:?}");
    }

    #[test]
    fn token_regressions_and_fenced_violations_fail_whatever_the_server_showed() {
        let victim = hold(1, 40);
        let mut cell = stale_writes_by(&[victim]);
        cell.token_regressions = 1;
        cell.fenced_violations = 2;
        let findings = judge(Row::Etcd3, Fault::FreezeMember, &cell, &[victim]);
        assert_eq!(
            findings.failing,
            ["2 fenced violations", "1 token regression"]
        );
    }

    #[test]
    fn checkers_that_disagree_fail_the_cell_in_every_row() {
        for row in [Row::Etcd, Row::Redis, Row::MUTANTS[0]] {
            let mut cell = measured(row, Fault::None);
            cell.disagreements
                .push("the checkers disagree (history h.json)".into());
            let merged = merge_one(row, Fault::None, cell, Vec::new());
            assert_eq!((merged.verdict.as_str(), merged.failures), ("fail", 1));
            assert!(
                merged.problems[0].ends_with("(history h.json)"),
                "{merged:?}"
            );
        }
    }

    #[test]
    fn a_trial_that_could_not_run_is_a_failure() {
        let trial = Trial {
            index: 0,
            seed: 1,
            outcome: Err("no holder".into()),
            revoked_early: Vec::new(),
        };
        let merged = merge(Row::Zk, Fault::PauseHolder, 1, vec![trial]);
        assert_eq!((merged.status.as_str(), merged.failures), ("failed", 1));
    }
}
