//! One cell of the matrix: what was measured, computed from the checking
//! resource's record and the fault's timeline. The JSON schema is this
//! struct (see `docs/safety.md`).

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::LostReason;
use serde::{Deserialize, Serialize};

use super::clock::ms_between;
use super::faults::Fault;
use super::inject::Timeline;
use super::resource::Record;
use super::row::Row;

/// p50, p99 and max of a set of delays, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(mut values: Vec<f64>) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let rank =
            |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Some(Spread {
            p50: rank(0.5),
            p99: rank(0.99),
            max: values[values.len() - 1],
        })
    }
}

/// One client's hold of one name, as a fencing token names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hold {
    /// The client's number.
    pub client: u32,
    /// The token of the acquisition.
    pub token: u64,
}

/// What a trial's record can blame on particular holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anomaly {
    /// A write the guard vouched for after another client was granted a
    /// higher token on the same name.
    VouchedStaleWrite,
    /// A lost signal that fired only after another client was granted the
    /// same name.
    LateLostSignal,
    /// Two clients' sections of one name interleaved.
    Overlap,
}

/// One anomaly and the holds it belongs to: the writer, the client whose
/// signal came late, or the two sections that overlapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    /// What happened.
    pub anomaly: Anomaly,
    /// Whose holds it was.
    pub holds: Vec<Hold>,
}

/// One backend × fault measurement (or why there is none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Row id: `etcd`, `etcd-3`, `redis`, `redlock`, `zk`, `zk-3`, `postgres`,
    /// `postgres-advisory`, `mysql`, `mysql-named`, `file`, `broken`;
    /// a primitive's row adds it, as `etcd-3/many-names`.
    pub backend: String,
    /// Fault number, 1 to 14.
    pub fault: u8,
    /// Fault id, e.g. `pause-holder`.
    pub fault_id: String,
    /// `measured`, `inapplicable` or `failed`.
    pub status: String,
    /// Why the cell is inapplicable or failed.
    pub reason: Option<String>,
    /// Whether the backend's tokens are meant to be strong (etcd, ZooKeeper).
    pub strong_tokens: bool,
    /// Lease TTL (ZooKeeper: session timeout), ms.
    pub ttl_ms: u64,
    /// Client processes.
    pub clients: u32,
    /// Wall time of the measurement, ms.
    pub duration_ms: f64,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Pairs of critical sections of two clients interleaved in the unfenced view.
    pub overlaps: u64,
    /// Sections another client entered before they ended: a client still
    /// inside after another had entered.
    pub sections_overlapped: u64,
    /// Writes the fenced view rejected as stale.
    pub stale_rejected: u64,
    /// Accepted writes the fenced view should not have accepted.
    pub fenced_violations: u64,
    /// Grants (in grant order) whose token was not above every earlier one.
    pub token_regressions: u64,
    /// Writes by a client whose guard already said it was lost.
    pub writes_after_loss_seen: u64,
    /// Writes made while the guard said held, at a moment another client
    /// had already been granted a higher token: the guard vouched for a
    /// lock someone else held. Fails a cell on a strong-token backend.
    #[serde(default)]
    pub vouched_stale_writes: u64,
    /// Writes made while the guard said held that the fenced view rejected
    /// as stale (a holder paused between its check and its write lands
    /// here without vouching falsely).
    #[serde(default)]
    pub held_writes_rejected: u64,
    /// Client processes that exited before the runner ended them.
    #[serde(default)]
    pub crashed_clients: u64,
    /// Client processes that went silent for longer than an acquisition
    /// may wait plus two TTLs.
    #[serde(default)]
    pub hung_clients: u64,
    /// Lost signals counted for the delay (the victim's, else all after the fault began).
    pub lost_signals: u64,
    /// From the moment the server could have ended the lease to the lost signal, ms.
    pub lost_signal_delay_ms: Option<Spread>,
    /// Lost signals that fired only after another client had been granted the lock.
    pub late_lost_signals: u64,
    /// Of those, the ones whose reason is `Revoked`: the server ended a
    /// lease the holder was renewing (someone broke the lock), which no
    /// client can see coming.
    #[serde(default)]
    pub late_lost_revoked: u64,
    /// From the heal (or the kept holder's release, if later; for faults on
    /// the holder, from the fault) to the next acquisition by another client, ms.
    pub recovery_ms: Option<f64>,
    /// Clients with no acquisition in the window after the heal.
    pub stuck_clients: u64,
    /// The length of that window, ms.
    pub stuck_window_ms: f64,
    /// Errors by `operation:kind`.
    pub errors: BTreeMap<String, u64>,
    /// The client kept inside its section through the fault.
    pub victim: Option<u32>,
    /// What the runner noticed.
    pub notes: Vec<String>,
    /// Trials run.
    #[serde(default)]
    pub trials: u32,
    /// Trials a verdict failed (or that could not run).
    #[serde(default)]
    pub failures: u32,
    /// Trials that failed only on a documented server bug, shown by the
    /// server itself (see `docs/safety.md`); never counted as passes.
    #[serde(default)]
    pub known_failures: u32,
    /// The cell's seed: with `--seed` of the run it draws every trial's
    /// fault timing, victim and fault length again.
    #[serde(default)]
    pub seed: u64,
    /// `pass`, `fail`, `known-failure`; in the broken and mutant rows
    /// `detected` or `undetected`; `inapplicable`; `failed` (could not run).
    #[serde(default)]
    pub verdict: String,
    /// In the broken and mutant rows: whether a verdict caught the broken
    /// promise.
    #[serde(default)]
    pub detected: Option<bool>,
    /// The history checker's verdict over every trial, where it ran.
    #[serde(default)]
    pub history_verdict: Option<String>,
    /// History events the clients recorded (acquire, release, writes,
    /// lost signals; invocations and completions).
    #[serde(default)]
    pub history_events: u64,
    /// Trials whose history the checker found not linearizable.
    #[serde(default)]
    pub history_not_linearizable: u32,
    /// Trials whose history the checker could not decide within its budget.
    #[serde(default)]
    pub history_unknown: u32,
    /// The second checker's verdict over every trial, naming it and its
    /// version (`porcupine-rs 0.3.0: linearizable in all 3 trials`).
    #[serde(default)]
    pub second_verdict: Option<String>,
    /// Trials whose history the second checker found not linearizable.
    #[serde(default)]
    pub second_not_linearizable: u32,
    /// Trials whose history the second checker could not decide in time.
    #[serde(default)]
    pub second_unknown: u32,
    /// Trials on which one checker found the history linearizable and the
    /// other did not, each with its history file: each fails the run.
    #[serde(default)]
    pub disagreements: Vec<String>,
    /// What each failing trial showed: `trial N (seed S): ...`.
    #[serde(default)]
    pub problems: Vec<String>,
    /// Each lost signal's delay, ms, for merging trials.
    #[serde(skip)]
    pub lost_delays: Vec<f64>,
    /// The trial's vouched stale writes, late lost signals and overlaps,
    /// each with the holds it belongs to, for the verdict.
    #[serde(skip)]
    pub attributed: Vec<Attributed>,
}

impl Cell {
    /// A cell with nothing measured.
    pub fn empty(row: Row, fault: Fault, status: &str, reason: Option<String>) -> Cell {
        Cell {
            backend: row.id().to_owned(),
            fault: fault.number(),
            fault_id: fault.id().to_owned(),
            status: status.to_owned(),
            reason,
            strong_tokens: row.strong_tokens(),
            ttl_ms: 0,
            clients: 0,
            duration_ms: 0.0,
            acquisitions: 0,
            overlaps: 0,
            sections_overlapped: 0,
            stale_rejected: 0,
            fenced_violations: 0,
            token_regressions: 0,
            writes_after_loss_seen: 0,
            lost_signals: 0,
            lost_signal_delay_ms: None,
            late_lost_signals: 0,
            late_lost_revoked: 0,
            recovery_ms: None,
            stuck_clients: 0,
            stuck_window_ms: 0.0,
            errors: BTreeMap::new(),
            victim: None,
            notes: Vec::new(),
            vouched_stale_writes: 0,
            held_writes_rejected: 0,
            crashed_clients: 0,
            hung_clients: 0,
            trials: 0,
            failures: 0,
            known_failures: 0,
            seed: 0,
            verdict: status.to_owned(),
            detected: None,
            history_verdict: None,
            history_events: 0,
            history_not_linearizable: 0,
            history_unknown: 0,
            second_verdict: None,
            second_not_linearizable: 0,
            second_unknown: 0,
            disagreements: Vec::new(),
            problems: Vec::new(),
            lost_delays: Vec::new(),
            attributed: Vec::new(),
        }
    }

    /// Whether the fenced view held: no fenced violation, no token regression.
    pub fn fenced_safe(&self) -> bool {
        self.fenced_violations == 0 && self.token_regressions == 0
    }

    /// Computes a measured cell.
    #[allow(clippy::too_many_arguments)]
    pub fn measure(
        row: Row,
        fault: Fault,
        ttl: Duration,
        clients: u32,
        began_ns: u64,
        ended_ns: u64,
        record: &Record,
        t: &Timeline,
    ) -> Cell {
        let mut cell = Cell::empty(row, fault, "measured", None);
        cell.ttl_ms = ttl.as_millis() as u64;
        cell.clients = clients;
        cell.duration_ms = ms_between(began_ns, ended_ns);
        cell.acquisitions = record.grants.len() as u64;
        cell.overlaps = record.overlaps;
        cell.sections_overlapped = record.sections_overlapped;
        cell.stale_rejected = record.stale_rejected;
        cell.fenced_violations = record.fenced_violations;
        cell.writes_after_loss_seen = record.writes_after_loss_seen;
        cell.history_events = record.history.len() as u64;
        cell.victim = t.victim.map(|v| v.client);
        cell.notes = t.notes.clone();
        for (what, _) in &record.errors {
            *cell.errors.entry(what.clone()).or_default() += 1;
        }

        let mut by_grant = record.grants.clone();
        by_grant.sort_by_key(|g| g.granted_ns);
        for write in &record.vouched {
            if write.rejected {
                cell.held_writes_rejected += 1;
            }
            let outranked = by_grant.iter().any(|g| {
                g.name == write.name
                    && g.client != write.client
                    && g.token > write.token
                    && g.granted_ns < write.checked_ns
            });
            if outranked {
                cell.vouched_stale_writes += 1;
                cell.attributed.push(Attributed {
                    anomaly: Anomaly::VouchedStaleWrite,
                    holds: vec![Hold {
                        client: write.client,
                        token: write.token,
                    }],
                });
            }
        }
        // Tokens must rise per name, in grant order.
        let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
        for grant in &by_grant {
            let name = grant.name.as_str();
            if highest.get(name).is_some_and(|&h| grant.token <= h) {
                cell.token_regressions += 1;
            }
            let high = highest.entry(name).or_insert(grant.token);
            *high = (*high).max(grant.token);
        }
        for overlap in &record.overlap_pairs {
            let hold = |(client, token)| Hold { client, token };
            cell.attributed.push(Attributed {
                anomaly: Anomaly::Overlap,
                holds: vec![hold(overlap.entered), hold(overlap.inside)],
            });
        }

        if fault != Fault::None {
            let lease_end = t.start_ns + fault.lease_end_offset(row, ttl).as_nanos() as u64;
            let relevant: Vec<_> = record
                .lost
                .iter()
                .filter(|l| match t.victim {
                    Some(v) if fault.targets_holder() => l.client == v.client && l.token == v.token,
                    _ => l.at_ns >= t.start_ns,
                })
                .collect();
            cell.lost_signals = relevant.len() as u64;
            cell.lost_delays = relevant
                .iter()
                .map(|l| ms_between(lease_end, l.at_ns))
                .collect();
            cell.lost_signal_delay_ms = Spread::of(cell.lost_delays.clone());
            let late: Vec<_> = relevant
                .iter()
                .filter(|l| {
                    record.grants.iter().any(|g| {
                        g.name == l.name
                            && g.client != l.client
                            && g.token > l.token
                            && g.arrived_ns < l.at_ns
                    })
                })
                .collect();
            for l in &late {
                cell.attributed.push(Attributed {
                    anomaly: Anomaly::LateLostSignal,
                    holds: vec![Hold {
                        client: l.client,
                        token: l.token,
                    }],
                });
            }
            let revoked = LostReason::Revoked.to_string();
            cell.late_lost_signals = late.len() as u64;
            cell.late_lost_revoked = late.iter().filter(|l| l.reason == revoked).count() as u64;

            let from = if fault.targets_holder() {
                t.start_ns
            } else {
                t.heal_ns
            };
            let first = by_grant
                .iter()
                .find(|g| g.granted_ns >= from && Some(g.client) != cell.victim);
            cell.recovery_ms = first.map(|g| {
                let base = match t.victim.and_then(|v| v.release_ns) {
                    Some(release) if !fault.targets_holder() && g.granted_ns >= release => {
                        release.max(from)
                    }
                    _ => from,
                };
                ms_between(base, g.granted_ns)
            });
        }

        let window_start = t.resume_ns();
        cell.stuck_window_ms = ms_between(window_start, ended_ns);
        // A killed client is not stuck: it is gone.
        let killed = t.victim.filter(|_| fault == Fault::KillClient);
        cell.stuck_clients = (0..clients)
            .filter(|c| killed.is_none_or(|v| v.client != *c))
            .filter(|c| {
                !record
                    .grants
                    .iter()
                    .any(|g| g.client == *c && g.granted_ns >= window_start)
            })
            .count() as u64;
        cell
    }
}
