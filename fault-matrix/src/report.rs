//! Output: a line per cell while running, the tables, the JSON document
//! and the SVG chart.

use std::fmt::Write as _;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};

use super::cell::Cell;
use super::faults::Fault;
use super::row::Row;

/// Which code a run measured, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// `git rev-parse HEAD`, or empty outside a repository.
    pub commit: String,
    /// Whether the work tree had changes (`git status --porcelain`).
    pub dirty: bool,
    /// UTC, RFC 3339.
    pub date: String,
}

impl Provenance {
    /// Reads them from git and the clock now.
    pub fn now() -> Provenance {
        let run = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        Provenance {
            commit: run("git", &["rev-parse", "HEAD"]).unwrap_or_default(),
            dirty: run("git", &["status", "--porcelain"]).is_some_and(|s| !s.is_empty()),
            date: run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_default(),
        }
    }
}

/// The `--json` document: run settings and a top-level `cells` array.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    /// Schema version of this document.
    pub schema: u32,
    /// The commit measured (`git rev-parse HEAD`).
    #[serde(default)]
    pub commit: String,
    /// Whether the work tree had changes beyond that commit.
    #[serde(default)]
    pub dirty: bool,
    /// When the run started, UTC.
    #[serde(default)]
    pub date: String,
    /// The run's seed: `--seed` with it draws every trial again.
    #[serde(default)]
    pub seed: u64,
    /// The command that produced it.
    pub command: String,
    /// Whether `--quick` shortened the windows.
    pub quick: bool,
    /// Wall time of the whole run, s.
    pub wall_s: f64,
    /// CPU cores of the machine.
    pub cores: usize,
    /// `/proc/loadavg`'s 1, 5 and 15 minute load averages at the end.
    pub load_average: String,
    /// One object per backend × fault.
    pub cells: Vec<Cell>,
}

fn ms(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The rows (backend labels: `etcd`, then `etcd/rwlock-write` and the
/// like, in the order they were run) and faults that `cells` cover, in
/// table order.
fn axes(cells: &[Cell]) -> (Vec<String>, Vec<Fault>) {
    let mut rows: Vec<String> = Vec::new();
    for r in Row::every() {
        let of_row = |label: &str| {
            label == r.id()
                || label
                    .strip_prefix(r.id())
                    .is_some_and(|s| s.starts_with('/'))
        };
        for c in cells.iter().filter(|c| of_row(&c.backend)) {
            if !rows.contains(&c.backend) {
                rows.push(c.backend.clone());
            }
        }
    }
    let faults = Fault::ALL
        .into_iter()
        .filter(|f| cells.iter().any(|c| c.fault == f.number()))
        .collect();
    (rows, faults)
}

/// The cell of row `r` under fault `f`.
fn find<'a>(cells: &'a [Cell], r: &str, f: Fault) -> Option<&'a Cell> {
    cells
        .iter()
        .find(|c| c.backend == r && c.fault == f.number())
}

/// One line summarising a cell, for progress on stderr.
pub fn line(cell: &Cell) -> String {
    match cell.status.as_str() {
        "measured" => format!(
            "{:<8} fault {}: {} ({} {}, {} failed, {} known; seed {:#x}): {} acq, {} overlaps, \
             {} stale, {} vouched stale, {} fenced violations, {} regressions, lost {}, \
             recovery {}, stuck {}",
            cell.backend,
            cell.fault,
            cell.verdict,
            cell.trials,
            super::verdict::plural(u64::from(cell.trials), "trial", "trials"),
            cell.failures,
            cell.known_failures,
            cell.seed,
            cell.acquisitions,
            cell.overlaps,
            cell.stale_rejected,
            cell.vouched_stale_writes,
            cell.fenced_violations,
            cell.token_regressions,
            cell.lost_signal_delay_ms.map_or("-".into(), |s| format!(
                "{}/{}/{} ms",
                ms(s.p50),
                ms(s.p99),
                ms(s.max)
            )),
            cell.recovery_ms
                .map_or("-".into(), |r| format!("{} ms", ms(r))),
            cell.stuck_clients,
        ),
        other => format!(
            "{:<8} fault {}: {other}: {}",
            cell.backend,
            cell.fault,
            cell.reason.as_deref().unwrap_or("")
        ),
    }
}

/// A cell's verdict for the grid: the verdict, and failing (or known)
/// trials of the trials run.
fn verdict_text(c: &Cell) -> String {
    match c.verdict.as_str() {
        "fail" => format!("**fail** {}/{}", c.failures, c.trials),
        "known-failure" => format!("known {}/{}", c.known_failures, c.trials),
        "undetected" => format!("**undetected** ({})", c.trials),
        "" | "measured" => "not judged".to_owned(),
        other => format!("{other} ({})", c.trials),
    }
}

/// The matrix as Markdown: a backend × fault grid of verdicts, one of
/// overlaps / stale rejected / vouched stale / fenced violations / token
/// regressions, then one line per measured cell, then the inapplicable
/// and failed cells.
pub fn table(cells: &[Cell]) -> String {
    let (rows, faults) = axes(cells);
    let mut out = String::new();
    let grid = |out: &mut String, text: &dyn Fn(&Cell) -> String| {
        out.push_str("| backend |");
        for f in &faults {
            let _ = write!(out, " {} {} |", f.number(), f.title());
        }
        out.push_str("\n|---|");
        out.push_str(&"---|".repeat(faults.len()));
        out.push('\n');
        for r in &rows {
            let _ = write!(out, "| {r} |");
            for &f in &faults {
                let shown = match find(cells, r, f) {
                    Some(c) if c.status == "measured" => text(c),
                    Some(c) if c.status == "inapplicable" => "—".to_owned(),
                    Some(_) => "could not run".to_owned(),
                    None => String::new(),
                };
                let _ = write!(out, " {shown} |");
            }
            out.push('\n');
        }
    };
    out.push_str(
        "Verdicts (pass, **fail** or known: failing trials / trials; detected or \
         **undetected** in the broken and mutant rows, with the trials run):\n\n",
    );
    grid(&mut out, &verdict_text);
    out.push_str(
        "\nOverlaps (unfenced) / stale writes rejected / vouched stale writes / fenced \
         violations / token regressions, summed over the trials:\n\n",
    );
    grid(&mut out, &|c: &Cell| {
        format!(
            "{} / {} / {} / {} / {}",
            c.overlaps,
            c.stale_rejected,
            c.vouched_stale_writes,
            c.fenced_violations,
            c.token_regressions
        )
    });
    out.push_str(
        "\nEvery measured cell, summed over its trials (delays pooled; recovery the \
         worst trial's; ms):\n\n",
    );
    out.push_str(
        "| backend | fault | trials | failed | known | seed | acq | overlaps | in section after \
         another entered | stale rejected | vouched stale | held writes rejected | fenced \
         violations | token regressions | lost signals | lost delay p50 / p99 / max | late lost \
         | recovery | stuck | crashed / hung | errors |\n",
    );
    out.push_str(&format!("|{}\n", "---|".repeat(21)));
    for r in &rows {
        for &f in &faults {
            let Some(c) = find(cells, r, f).filter(|c| c.status == "measured") else {
                continue;
            };
            let delay = c.lost_signal_delay_ms.map_or("—".into(), |s| {
                format!("{} / {} / {}", ms(s.p50), ms(s.p99), ms(s.max))
            });
            let errors = if c.errors.is_empty() {
                "—".to_owned()
            } else {
                c.errors
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "| {} | {} {} | {} | {} | {} | `{:#x}` | {} | {} | {} | {} | {} | {} | {} | {} | \
                 {} | {} | {} | {} | {} | {} / {} | {} |",
                c.backend,
                f.number(),
                f.title(),
                c.trials,
                c.failures,
                c.known_failures,
                c.seed,
                c.acquisitions,
                c.overlaps,
                c.sections_overlapped,
                c.stale_rejected,
                c.vouched_stale_writes,
                c.held_writes_rejected,
                c.fenced_violations,
                c.token_regressions,
                c.lost_signals,
                delay,
                late_lost(c),
                c.recovery_ms.map_or("—".into(), ms),
                c.stuck_clients,
                c.crashed_clients,
                c.hung_clients,
                errors
            );
        }
    }
    let others: Vec<&Cell> = cells.iter().filter(|c| c.status != "measured").collect();
    if !others.is_empty() {
        out.push_str("\nCells not measured:\n\n| backend | fault | | why |\n|---|---|---|---|\n");
        for c in others {
            let status = if c.status == "inapplicable" {
                "—"
            } else {
                "failed"
            };
            let _ = writeln!(
                out,
                "| {} | {} {} | {status} | {} |",
                c.backend,
                c.fault,
                c.fault_id,
                c.reason.as_deref().unwrap_or("")
            );
        }
    }
    out
}

/// What a chart panel shows of a cell.
type Metric = dyn Fn(&Cell) -> Option<f64>;

const FONT: &str = "sans-serif";
const CELL_W: i32 = 118;
const CELL_H: i32 = 34;
const LABEL_W: i32 = 90;
const TOP: i32 = 80;

/// Two grids side by side, backend × fault: the victim's worst lost-signal
/// delay, and the overlaps; a darker square is a larger number.
pub fn svg(cells: &[Cell]) -> Result<String, String> {
    let (rows, faults) = axes(cells);
    // The two grids one above the other.
    let grid_h = TOP + CELL_H * rows.len() as i32;
    let size = (
        (LABEL_W + CELL_W * faults.len() as i32 + 30) as u32,
        (2 * grid_h + 30) as u32,
    );
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let title = "distlock fault matrix (— does not apply, ✗ failed)";
        root.draw(&Text::new(title, (10, 10), (FONT, 19).into_font()))
            .map_err(|e| e.to_string())?;
        let panels: [(&str, Box<Metric>); 2] = [
            (
                "lost-signal delay, max ms (from when the server could end the lease)",
                Box::new(|c: &Cell| c.lost_signal_delay_ms.map(|s| s.max)),
            ),
            (
                "overlaps in the unfenced view",
                Box::new(|c: &Cell| Some(c.overlaps as f64)),
            ),
        ];
        for (p, (caption, value)) in panels.iter().enumerate() {
            let x0 = 10;
            let y0 = p as i32 * grid_h;
            root.draw(&Text::new(*caption, (x0, y0 + 40), (FONT, 14).into_font()))
                .map_err(|e| e.to_string())?;
            let max = cells
                .iter()
                .filter(|c| c.status == "measured")
                .filter_map(value.as_ref())
                .fold(0.0f64, f64::max);
            let centered = |size| {
                TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Center, VPos::Center))
            };
            for (j, f) in faults.iter().enumerate() {
                let x = x0 + LABEL_W + j as i32 * CELL_W + CELL_W / 2;
                root.draw(&Text::new(
                    format!("{} {}", f.number(), f.title()),
                    (x, y0 + TOP - 12),
                    centered(13),
                ))
                .map_err(|e| e.to_string())?;
            }
            for (i, r) in rows.iter().enumerate() {
                let y = y0 + TOP + i as i32 * CELL_H;
                root.draw(&Text::new(
                    r.as_str(),
                    (x0, y + CELL_H / 2 - 7),
                    (FONT, 14).into_font(),
                ))
                .map_err(|e| e.to_string())?;
                for (j, f) in faults.iter().enumerate() {
                    let x = x0 + LABEL_W + j as i32 * CELL_W;
                    let (fill, text) = match find(cells, r, *f) {
                        Some(c) if c.status == "measured" => match value(c) {
                            Some(v) => {
                                let share = if max > 0.0 {
                                    (v.max(0.0) / max).sqrt()
                                } else {
                                    0.0
                                };
                                let shade = (235.0 - 175.0 * share) as u8;
                                (RGBColor(shade, shade, 255), ms(v))
                            }
                            None => (RGBColor(245, 245, 245), "no loss".to_owned()),
                        },
                        Some(c) if c.status == "inapplicable" => {
                            (RGBColor(255, 255, 255), "—".to_owned())
                        }
                        Some(_) => (RGBColor(255, 200, 200), "✗".to_owned()),
                        None => (RGBColor(255, 255, 255), String::new()),
                    };
                    root.draw(&Rectangle::new(
                        [(x + 1, y + 1), (x + CELL_W - 1, y + CELL_H - 1)],
                        fill.filled(),
                    ))
                    .map_err(|e| e.to_string())?;
                    root.draw(&Text::new(
                        text,
                        (x + CELL_W / 2, y + CELL_H / 2),
                        centered(13),
                    ))
                    .map_err(|e| e.to_string())?;
                }
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The late lost signals, with how many of them were revocations (the
/// server ended a lease that was being renewed).
fn late_lost(cell: &Cell) -> String {
    match cell.late_lost_revoked {
        0 => cell.late_lost_signals.to_string(),
        revoked => format!("{} ({revoked} revoked)", cell.late_lost_signals),
    }
}
