//! The fault matrix runner: every backend under every fault, measured with
//! separate client processes and a checking resource.
//!
//! ```text
//! fault-matrix [--quick] [--json FILE] [--svg FILE] [--markdown FILE]
//!              [--backends etcd,etcd-3,redis,redis-cluster,redlock,zk,zk-3,file,broken]
//!              [--faults 1,2,...,9] [--clients N]
//!              [--contend lock,rwlock-write,semaphore-1]
//! ```
//!
//! Prints the table on stdout. Fails (exit 1) when a cell could not run,
//! when an etcd or ZooKeeper cell shows a fenced violation or a token
//! regression, or when the `broken` row does not make the detector fire.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use fault_matrix::report::{self, Document};
use fault_matrix::usage::args_or_exit;
use fault_matrix::{Cell, Contended, Fault, Plan, Row, run_row};

#[derive(Debug, Default)]
struct Args {
    quick: bool,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    markdown: Option<PathBuf>,
    backends: Option<Vec<Row>>,
    faults: Option<Vec<Fault>>,
    clients: Option<u32>,
    contended: Option<Vec<Contended>>,
    from_json: Option<PathBuf>,
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
            "--backends" => {
                args.backends = Some(list(
                    &value()?,
                    Row::parse,
                    "backend (known: etcd, etcd-3, redis, redis-cluster, redlock, zk, zk-3, file, broken)",
                )?);
            }
            "--faults" => {
                args.faults = Some(list(&value()?, Fault::parse, "fault (known: 1 to 9)")?)
            }
            "--contend" => {
                args.contended = Some(list(
                    &value()?,
                    Contended::parse,
                    "primitive (known: lock, rwlock-write, semaphore-1)",
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
                     [--contend LIST (lock, rwlock-write, semaphore-1; default lock)] \
                     [--from-json FILE (draw the table and chart of an earlier run)]"
                    .into());
            }
            other => return Err(format!("unknown flag {other}; see --help")),
        }
    }
    Ok(args)
}

/// What makes the run fail.
fn problems(cells: &[Cell]) -> Vec<String> {
    let mut out = Vec::new();
    for c in cells {
        let at = format!("{} fault {}", c.backend, c.fault);
        match c.status.as_str() {
            "failed" => out.push(format!(
                "{at} failed: {}",
                c.reason.as_deref().unwrap_or("")
            )),
            "measured" if c.strong_tokens && !c.fenced_safe() => out.push(format!(
                "{at}: {} fenced violations, {} token regressions on a backend with strong tokens",
                c.fenced_violations, c.token_regressions
            )),
            "measured"
                if c.strong_tokens
                    && vouches_while_running(c)
                    && c.late_lost_signals > c.late_lost_revoked =>
            {
                out.push(format!(
                    "{at}: {} lost signals fired only after another client was granted the lock: \
                     a running holder's guard vouched for a lock someone else held",
                    c.late_lost_signals - c.late_lost_revoked
                ))
            }
            "measured"
                if c.backend == Row::Broken.id()
                    && c.fault == 1
                    && (c.overlaps == 0 || c.fenced_violations == 0) =>
            {
                out.push(format!(
                    "{at}: the detector did not fire on a lock that excludes nobody \
                     ({} overlaps, {} fenced violations)",
                    c.overlaps, c.fenced_violations
                ));
            }
            _ => {}
        }
    }
    out
}

/// Whether the victim keeps running through the cell's fault while the
/// servers can end its lease: the partition, slow network, leader and
/// member faults. Then a backend whose tokens are strong must fire the lost
/// signal before anyone else is granted the lock. A paused victim cannot
/// (it learns on waking), nor can a lock broken from outside (the victim
/// learns right after the next grant), nor a restart of every server (the
/// new grant may come the moment the servers are back); those are
/// reported, not judged. Nor is a lease the server revoked while its holder
/// was renewing it (lost reason `Revoked`): that is a lock broken from
/// outside, whatever the fault (etcd 3.4.23, Debian's, lets a leader that
/// was frozen revoke such leases once it resumes: etcd issue 15247).
fn vouches_while_running(cell: &Cell) -> bool {
    (3..=8).contains(&cell.fault) && cell.fault != 5
}

/// Prints the table and writes the files asked for; false if one failed.
fn publish(args: &Args, document: &Document, json: bool) -> bool {
    let table = report::table(&document.cells);
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
    if let Some(path) = &args.svg {
        match report::svg(&document.cells) {
            Ok(svg) => write(path, svg),
            Err(e) => {
                eprintln!("fault-matrix: chart: {e}");
                ok = false;
            }
        }
    }
    ok
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
    let rows = args.backends.clone().unwrap_or_else(|| Row::ALL.to_vec());
    let faults = args.faults.clone().unwrap_or_else(|| {
        if args.quick {
            Fault::QUICK.to_vec()
        } else {
            Fault::ALL.to_vec()
        }
    });
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
    let contended = args
        .contended
        .clone()
        .unwrap_or_else(|| vec![Contended::Lock]);
    for row in rows {
        for &primitive in &contended {
            plan.contended = primitive;
            cells.extend(run_row(row, &faults, &plan, &logs).await);
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let document = Document {
        schema: 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frozen_leader_cell(late: u64, revoked: u64) -> Cell {
        let mut cell = Cell::empty(Row::Etcd3, Fault::FreezeMember, "measured", None);
        cell.late_lost_signals = late;
        cell.late_lost_revoked = revoked;
        cell
    }

    #[test]
    fn a_late_signal_fails_the_run_unless_the_server_revoked_the_lease() {
        assert!(problems(&[frozen_leader_cell(0, 0)]).is_empty());
        assert!(problems(&[frozen_leader_cell(2, 2)]).is_empty());
        let found = problems(&[frozen_leader_cell(2, 1)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("1 lost signals"), "{found:?}");
    }
}
