//! The fault matrix runner: every backend under every fault, measured with
//! separate client processes and a checking resource.
//!
//! ```text
//! fault-matrix [--quick] [--json FILE] [--svg FILE] [--markdown FILE]
//!              [--backends etcd,etcd-3,redis,redis-cluster,redlock,zk,zk-3,postgres,
//!                          postgres-advisory,mysql,mysql-named,file,broken,mutant-…]
//!              [--faults 1,2,...,14] [--clients N] [--seed N] [--trials N]
//!              [--flip-trials N] [--contend lock,rwlock-write,semaphore-1,many-names]
//!              [--histories DIR]
//! ```
//!
//! Prints the table on stdout. Fails (exit 1) when a cell could not run,
//! when an etcd or ZooKeeper cell shows a fenced violation or a token
//! regression, or when the `broken` row does not make the detector fire.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use fault_matrix::report::{self, Document, Provenance};
use fault_matrix::run::planned_trials;
use fault_matrix::summary;
use fault_matrix::usage::args_or_exit;
use fault_matrix::verdict::plural;
use fault_matrix::{Cell, Contended, Fault, Plan, Row, run_row};

/// A `--backends` entry: a row, or a row and one primitive
/// (`etcd-3/many-names`).
fn parse_backend(text: &str) -> Option<(Row, Option<Contended>)> {
    match text.split_once('/') {
        Some((row, primitive)) => Some((Row::parse(row)?, Some(Contended::parse(primitive)?))),
        None => Some((Row::parse(text)?, None)),
    }
}

#[derive(Debug, Default)]
struct Args {
    quick: bool,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    markdown: Option<PathBuf>,
    backends: Option<Vec<(Row, Option<Contended>)>>,
    faults: Option<Vec<Fault>>,
    clients: Option<u32>,
    contended: Option<Vec<Contended>>,
    from_json: Option<PathBuf>,
    seed: Option<u64>,
    trials: Option<u32>,
    flip_trials: Option<u32>,
    splice: Option<PathBuf>,
    histories: Option<PathBuf>,
}

fn list<T>(text: &str, parse: impl Fn(&str) -> Option<T>, what: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| parse(s.trim()).ok_or_else(|| format!("unknown {what} {s:?}")))
        .collect()
}

fn parse() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--quick" => args.quick = true,
            "--json" => args.json = Some(value()?.into()),
            "--svg" => args.svg = Some(value()?.into()),
            "--markdown" => args.markdown = Some(value()?.into()),
            "--from-json" => args.from_json = Some(value()?.into()),
            "--splice" => args.splice = Some(value()?.into()),
            "--histories" => args.histories = Some(value()?.into()),
            "--seed" => {
                let text = value()?;
                let parsed = match text.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => text.parse(),
                };
                args.seed = Some(parsed.map_err(|e| format!("--seed {text:?}: {e}"))?);
            }
            "--trials" => {
                let n: u32 = value()?.parse().map_err(|e| format!("--trials: {e}"))?;
                if n == 0 {
                    return Err("--trials must be at least 1".into());
                }
                args.trials = Some(n);
            }
            "--flip-trials" => {
                let n: u32 = value()?
                    .parse()
                    .map_err(|e| format!("--flip-trials: {e}"))?;
                if n == 0 {
                    return Err("--flip-trials must be at least 1".into());
                }
                args.flip_trials = Some(n);
            }
            "--backends" => {
                args.backends = Some(list(
                    &value()?,
                    parse_backend,
                    "backend (known: etcd, etcd-3, redis, redis-cluster, redlock, zk, zk-3, postgres, \
                     postgres-advisory, mysql, mysql-named, file, broken, mutant-no-exclusion, mutant-silent-loss, mutant-long-validity, mutant-unconfirmed-turn; \
                     ROW/PRIMITIVE such as etcd-3/many-names runs that primitive only)",
                )?);
            }
            "--faults" => {
                args.faults = Some(list(&value()?, Fault::parse, "fault (known: 1 to 14)")?)
            }
            "--contend" => {
                args.contended = Some(list(
                    &value()?,
                    Contended::parse,
                    "primitive (known: lock, rwlock-write, semaphore-1, many-names)",
                )?);
            }
            "--clients" => {
                let n: u32 = value()?.parse().map_err(|e| format!("--clients: {e}"))?;
                if n < 2 {
                    return Err("--clients must be at least 2".into());
                }
                args.clients = Some(n);
            }
            "-h" | "--help" => {
                return Err("usage: fault-matrix [--quick] [--json FILE] [--svg FILE] \
                     [--markdown FILE] [--backends LIST] [--faults LIST] [--clients N] \
                     [--contend LIST (lock, rwlock-write, semaphore-1, many-names; default lock)] \
                     [--seed N (default: from the clock; printed)] [--trials N (every cell)] \
                     [--flip-trials N (cells whose verdict can flip; after --trials)] \
                     [--from-json FILE (draw the table and chart of an earlier run)] \
                     [--splice FILE (replace the generated parts of docs/safety.md)] \
                     [--histories DIR (write every trial's history and both verdicts there)]"
                    .into());
            }
            other => return Err(format!("unknown flag {other}; see --help")),
        }
    }
    Ok(args)
}

/// What makes the run fail: a cell that could not run, a failing verdict,
/// a broken or mutant row that no verdict caught.
fn problems(cells: &[Cell]) -> Vec<String> {
    let mut out = Vec::new();
    for c in cells {
        let at = format!("{} fault {}", c.backend, c.fault);
        match (c.status.as_str(), c.verdict.as_str()) {
            ("failed", _) => out.push(format!(
                "{at} failed: {}",
                c.reason.as_deref().unwrap_or("")
            )),
            (_, "fail") => {
                let shown: Vec<&str> = c.problems.iter().take(3).map(String::as_str).collect();
                out.push(format!(
                    "{at}: {} of {} {} failed: {}",
                    c.failures,
                    c.trials,
                    plural(u64::from(c.trials), "trial", "trials"),
                    shown.join("; ")
                ));
            }
            _ => {}
        }
        for d in &c.disagreements {
            out.push(format!("{at}: {d}"));
        }
    }
    for row in Row::every().filter(|r| r.must_be_caught()) {
        let of_row: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.backend == row.id() && c.status == "measured")
            .collect();
        if !of_row.is_empty() && !of_row.iter().any(|c| c.detected == Some(true)) {
            out.push(format!(
                "{row}: no verdict caught it in {} {}",
                of_row.len(),
                plural(of_row.len() as u64, "cell", "cells")
            ));
        }
    }
    out
}

/// Prints the table and writes the files asked for; false if one failed.
fn publish(args: &Args, document: &Document, json: bool) -> bool {
    let table = summary::markdown(document);
    println!("{table}");
    println!("wall time: {:.0} s", document.wall_s);
    let mut ok = true;
    let mut write = |path: &PathBuf, text: String| {
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("fault-matrix: write {}: {e}", path.display());
            ok = false;
        }
    };
    if let Some(path) = args.json.as_ref().filter(|_| json) {
        write(
            path,
            serde_json::to_string_pretty(document).expect("cells serialize") + "\n",
        );
    }
    if let Some(path) = &args.markdown {
        write(path, table.clone());
    }
    let mut spliced_ok = true;
    if let Some(path) = &args.splice {
        let spliced = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|page| summary::splice(&page, &table));
        match spliced {
            Ok(page) => write(path, page),
            Err(e) => {
                eprintln!("fault-matrix: splice into {}: {e}", path.display());
                spliced_ok = false;
            }
        }
    }
    if let Some(path) = &args.svg {
        match report::svg(&document.cells) {
            Ok(svg) => write(path, svg),
            Err(e) => {
                eprintln!("fault-matrix: chart: {e}");
                ok = false;
            }
        }
    }
    ok && spliced_ok
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = args_or_exit("fault-matrix", parse());
    if let Some(path) = &args.from_json {
        let document: Document = match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        {
            Ok(document) => document,
            Err(e) => {
                eprintln!("fault-matrix: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        return if publish(&args, &document, false) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let client_bin = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("fault-matrix-client"),
        Err(e) => {
            eprintln!("fault-matrix: where am I? {e}");
            return ExitCode::FAILURE;
        }
    };
    if !client_bin.exists() {
        eprintln!(
            "fault-matrix: {} is missing; build both binaries (cargo build -p fault-matrix \
             --bins)",
            client_bin.display()
        );
        return ExitCode::FAILURE;
    }
    let mut plan = if args.quick {
        Plan::quick(client_bin)
    } else {
        Plan::full(client_bin)
    };
    if let Some(n) = args.clients {
        plan.clients = n;
    }
    if let Some(n) = args.trials {
        plan = plan.with_trials(n);
    }
    if let Some(n) = args.flip_trials {
        plan.flip_trials = n;
    }
    plan.seed = args.seed.unwrap_or_else(clock_seed);
    plan.histories = args.histories.clone();
    eprintln!("fault-matrix: seed {:#x} (replay with --seed)", plan.seed);
    let rows: Vec<(Row, Option<Contended>)> = args
        .backends
        .clone()
        .unwrap_or_else(|| Row::every().map(|row| (row, None)).collect());
    let faults_of = |row: Row| match &args.faults {
        Some(faults) => faults.clone(),
        None if args.quick => Fault::quick(row),
        None => Fault::full(row),
    };
    // A mutant built into a client of its own must be there before any
    // cell starts, not fail every trial of its row.
    for (row, _) in &rows {
        if let Err(e) = plan.client_bin_for(row.mutant()) {
            eprintln!("fault-matrix: {e}");
            return ExitCode::FAILURE;
        }
    }
    let provenance = Provenance::now();
    let primitives_of = |(row, pinned): (Row, Option<Contended>)| match (pinned, &args.contended) {
        (Some(primitive), _) => vec![primitive],
        (None, Some(contended)) => contended.clone(),
        (None, None) if args.quick => vec![Contended::Lock],
        (None, None) => Contended::full(row),
    };
    let planned: u32 = rows
        .iter()
        .flat_map(|&(row, pinned)| {
            primitives_of((row, pinned))
                .into_iter()
                .map(move |c| (row, c))
        })
        .map(|(row, primitive)| {
            let plan = Plan {
                contended: primitive,
                ..plan.clone()
            };
            planned_trials(row, &faults_of(row), &plan)
        })
        .sum();
    eprintln!("fault-matrix: {planned} trials planned");
    let logs = match tempfile::Builder::new()
        .prefix("fault-matrix-logs-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("fault-matrix: log directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let mut cells = Vec::new();
    for (row, pinned) in rows {
        for primitive in primitives_of((row, pinned)) {
            plan.contended = primitive;
            cells.extend(run_row(row, &faults_of(row), &plan, &logs).await);
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let document = Document {
        schema: 2,
        commit: provenance.commit,
        dirty: provenance.dirty,
        date: provenance.date,
        seed: plan.seed,
        command: std::iter::once("fault-matrix".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        quick: args.quick,
        wall_s,
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        load_average: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        cells,
    };
    let failed = !publish(&args, &document, true);
    let cells = document.cells;
    let problems = problems(&cells);
    for p in &problems {
        eprintln!("fault-matrix: {p}");
    }
    if failed || !problems.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A seed from the clock, for runs not given one.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(row: Row, verdict: &str, detected: Option<bool>) -> Cell {
        let mut cell = Cell::empty(row, Fault::None, "measured", None);
        cell.verdict = verdict.to_owned();
        cell.detected = detected;
        cell
    }

    #[test]
    fn a_failing_verdict_or_an_undetected_mutant_fails_the_run() {
        assert!(problems(&[cell(Row::Etcd, "pass", None)]).is_empty());
        assert!(problems(&[cell(Row::Etcd3, "known-failure", None)]).is_empty());
        assert_eq!(problems(&[cell(Row::Etcd, "fail", None)]).len(), 1);
        let mutant = Row::MUTANTS[0];
        assert!(problems(&[cell(mutant, "detected", Some(true))]).is_empty());
        let found = problems(&[cell(mutant, "undetected", Some(false))]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("no verdict caught it"), "{found:?}");
    }
}
