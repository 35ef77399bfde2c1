//! The sweep's tables on stdout: one per backend, one row per point.
//! Figures that grow with the machine's load are also given as a ratio to
//! the backend's first point, measured in the same run.

use std::fmt::Write as _;

use super::super::table::{aligned, human_ms, ms, ratio};
use super::{BackendSweep, Point, SweepOutput};
use crate::cli::Sweep;

pub(super) fn render(output: &SweepOutput) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", title(output));
    for backend in &output.backends {
        let _ = writeln!(out, "\n{} ({})", backend.backend, backend.url);
        let table = match output.sweep {
            Sweep::Held => held_table(backend),
            sweep => workload_table(sweep.as_str(), backend),
        };
        out.push_str(&table);
    }
    out
}

/// What the sweep grew, and for how long each point ran.
pub(super) fn title(output: &SweepOutput) -> String {
    let each = human_ms(output.duration_ms);
    match output.sweep {
        Sweep::Held => format!("locks held at once by one client, each point held {each}"),
        Sweep::Names => format!(
            "{} clients over a growing number of lock names, {each} per point",
            output.clients
        ),
        Sweep::Clients => format!(
            "a growing number of clients on {} lock name(s), {each} per point",
            output.locks
        ),
    }
}

/// A row for a point without a measurement: the error in the last column.
fn failed_row(point: &Point, columns: usize) -> Vec<String> {
    let mut row = vec![point.at.to_string(), "failed".to_owned()];
    row.extend(std::iter::repeat_n("-".to_owned(), columns - 3));
    row.push(point.error.clone().unwrap_or_default());
    row
}

fn workload_table(sweep: &str, backend: &BackendSweep) -> String {
    let header = [
        sweep,
        "acq/s",
        "vs first",
        "p50 ms",
        "p99 ms",
        "p99 vs first",
        "violations",
        "errors",
        "notes",
    ];
    let first = backend.points.iter().find_map(|p| p.workload.as_ref());
    let rows = backend
        .points
        .iter()
        .map(|point| match &point.workload {
            Some(r) => vec![
                point.at.to_string(),
                format!("{:.0}", r.per_second),
                first.map_or("-".into(), |f| ratio(r.per_second, f.per_second)),
                ms(r.wait.p50_us),
                ms(r.wait.p99_us),
                first.map_or("-".into(), |f| {
                    ratio(r.wait.p99_us as f64, f.wait.p99_us as f64)
                }),
                r.violations.to_string(),
                r.errors.to_string(),
                r.first_error.clone().unwrap_or_default(),
            ],
            None => failed_row(point, header.len()),
        })
        .collect();
    aligned(&header, rows)
}

fn held_table(backend: &BackendSweep) -> String {
    let header = [
        "held",
        "acquire s",
        "release s",
        "lost",
        "server req/s",
        "req/lock/(TTL/3)",
        "peak/mean 100ms",
        "CPU us/lock/s",
        "RSS B/lock",
        "counted",
    ];
    let rows = backend
        .points
        .iter()
        .map(|point| match &point.held {
            Some(h) => {
                let rate = h.server_requests.map_or("-".into(), |r| {
                    format!("{:.1}", r as f64 * 1000.0 / h.hold_ms.max(1) as f64)
                });
                vec![
                    point.at.to_string(),
                    format!("{:.2}", h.acquire_ms as f64 / 1000.0),
                    format!("{:.2}", h.release_ms as f64 / 1000.0),
                    h.lost.to_string(),
                    rate,
                    h.requests_per_lock_per_period()
                        .map_or("-".into(), |r| format!("{r:.3}")),
                    h.server_peak_to_mean
                        .map_or("-".into(), |r| format!("{r:.1}")),
                    format!("{:.1}", h.cpu_us_per_lock_second()),
                    format!("{:.0}", h.rss_per_lock()),
                    format!("{} (TTL {} s)", h.server_counter, h.ttl_ms as f64 / 1000.0),
                ]
            }
            None => failed_row(point, header.len()),
        })
        .collect();
    aligned(&header, rows)
}
