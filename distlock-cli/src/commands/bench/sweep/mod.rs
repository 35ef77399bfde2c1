//! `distlock bench --sweep`: cost as work grows. Each backend in turn runs
//! every point of the sweep, smallest first:
//!
//! - `held`: one client holds N locks at once ([`held`]);
//! - `names`: `--clients` clients over N names, the contention workload;
//! - `clients`: N clients over `--locks` names, the contention workload.
//!
//! A point that fails or times out gets a row saying so, and the sweep goes
//! on: the shape of the curve is the result, and a missing point is part of
//! it.

mod held;
mod isolate;
mod plot;
mod server;
mod table;

use std::path::PathBuf;

use distlock::Config;
use distlock_workload::{HoldConfig, Primitive, WorkloadReport};
use serde::Serialize;

use super::outputs::Outputs;
use super::{Shape, run_on};
use crate::cli::{BenchArgs, Sweep};
use crate::exit::{Failure, UNAVAILABLE};
pub(crate) use held::HeldReport;

/// Everything `--json` writes for a sweep.
#[derive(Debug, Serialize)]
pub(crate) struct SweepOutput {
    /// What grew.
    pub(crate) sweep: Sweep,
    /// Per point: the hold (`held`) or the run (`names`, `clients`).
    pub(crate) duration_ms: u128,
    /// Clients of the `names` sweep.
    pub(crate) clients: usize,
    /// Names of the `clients` sweep.
    pub(crate) locks: usize,
    pub(crate) backends: Vec<BackendSweep>,
}

/// One backend's points.
#[derive(Debug, Serialize)]
pub(crate) struct BackendSweep {
    /// The URL, password masked.
    pub(crate) url: String,
    /// Short backend name (`etcd`, ...), or the URL's scheme if it could
    /// not be connected to.
    pub(crate) backend: String,
    pub(crate) points: Vec<Point>,
}

/// One point's outcome: a measurement, or why there is none.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    /// The swept value: locks held, names or clients.
    pub(crate) at: usize,
    /// `names` and `clients` sweeps.
    pub(crate) workload: Option<WorkloadReport>,
    /// `held` sweep.
    pub(crate) held: Option<HeldReport>,
    pub(crate) error: Option<String>,
}

impl Sweep {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Sweep::Held => "held",
            Sweep::Names => "names",
            Sweep::Clients => "clients",
        }
    }

    /// The published points: from one to where the backends bend.
    fn default_points(self) -> Vec<usize> {
        match self {
            Sweep::Held => vec![1, 100, 1000, 10_000],
            Sweep::Names => vec![1, 10, 100, 1000],
            Sweep::Clients => vec![1, 4, 16, 64],
        }
    }
}

/// Runs the sweep on every config; `config_file` is `--config`, for the
/// child processes of the held-locks points.
pub(super) async fn run(
    args: &BenchArgs,
    what: Sweep,
    config_file: Option<&PathBuf>,
    configs: &[Config],
) -> Result<u8, Failure> {
    let points = if args.points.is_empty() {
        what.default_points()
    } else {
        args.points.clone()
    };
    if points.contains(&0) {
        return Err(Failure::usage("--points must all be at least 1"));
    }
    if args.concurrency == 0 {
        return Err(Failure::usage("--concurrency must be at least 1"));
    }
    let outputs = Outputs::create(args)?;
    let mut backends = Vec::new();
    for (index, config) in configs.iter().enumerate() {
        let backend = Backend {
            config,
            config_file,
            index,
        };
        backends.push(sweep_one(args, what, &points, backend).await);
    }
    let output = SweepOutput {
        sweep: what,
        duration_ms: args.duration.as_millis(),
        clients: args.clients,
        locks: args.locks,
        backends,
    };
    print!("{}", table::render(&output));
    outputs.write(&output, plot::render)?;
    let points = output.backends.iter().flat_map(|b| &b.points);
    let failed = points.clone().filter(|p| p.error.is_some()).count();
    let unsafe_points = points
        .filter(|p| {
            p.workload.as_ref().is_some_and(|w| w.violations > 0)
                || p.held.as_ref().is_some_and(|h| h.lost > 0)
        })
        .count();
    if failed > 0 || unsafe_points > 0 {
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "{failed} point(s) failed or timed out and {unsafe_points} lost locks or \
                 violated mutual exclusion; see the tables"
            ),
        ));
    }
    Ok(0)
}

/// Every point on one backend; a backend that cannot be reached gets one
/// failed point per value, so that its table still shows the sweep.
async fn sweep_one(
    args: &BenchArgs,
    what: Sweep,
    points: &[usize],
    target: Backend<'_>,
) -> BackendSweep {
    let config = target.config;
    let url = config.redacted_url();
    let backend = match distlock::connect_with(config).await {
        Ok(client) => Ok(client.capabilities().backend),
        Err(e) => Err(e.to_string()),
    };
    let name = match &backend {
        Ok(name) => (*name).to_owned(),
        Err(_) => url.split("://").next().unwrap_or("?").to_owned(),
    };
    let mut results = Vec::with_capacity(points.len());
    for &at in points {
        let outcome = match backend {
            Ok(backend) => measure(args, what, at, target, backend).await,
            Err(ref e) => Err(e.clone()),
        };
        let point = match outcome {
            Ok(Measured::Workload(report)) => Point::of(at, Some(report), None, None),
            Ok(Measured::Held(report)) => Point::of(at, None, Some(report), None),
            Err(e) => {
                eprintln!(
                    "distlock: bench {url}: --sweep {} at {at}: {e}",
                    what.as_str()
                );
                Point::of(at, None, None, Some(e))
            }
        };
        results.push(point);
    }
    BackendSweep {
        url,
        backend: name,
        points: results,
    }
}

impl Point {
    fn of(
        at: usize,
        workload: Option<WorkloadReport>,
        held: Option<HeldReport>,
        error: Option<String>,
    ) -> Self {
        Point {
            at,
            workload,
            held,
            error,
        }
    }
}

/// What one point measured.
#[derive(Debug)]
enum Measured {
    Workload(WorkloadReport),
    Held(HeldReport),
}

/// The backend a sweep runs on.
#[derive(Debug, Clone, Copy)]
struct Backend<'a> {
    config: &'a Config,
    /// `--config`, for child processes.
    config_file: Option<&'a PathBuf>,
    /// Its place among the URLs, for distinct lock names.
    index: usize,
}

/// Runs point `at` of the sweep on `target`'s backend (named `backend`).
async fn measure(
    args: &BenchArgs,
    what: Sweep,
    at: usize,
    target: Backend<'_>,
    backend: &str,
) -> Result<Measured, String> {
    let Backend {
        config,
        config_file,
        index,
    } = target;
    let shape = match what {
        Sweep::Held if !args.in_process => {
            return isolate::held_point(args, config_file, config, at)
                .await
                .map(Measured::Held);
        }
        Sweep::Held => {
            let settings = HoldConfig {
                locks: at,
                concurrency: args.concurrency,
                ttl: args.ttl,
                name_prefix: format!("{}-held{at}", super::names(args, index)),
                acquire_within: args.acquire_within,
            };
            return held::measure(config, at, args.duration, settings)
                .await
                .map(Measured::Held);
        }
        Sweep::Names => Shape {
            clients: args.clients,
            locks: at,
        },
        Sweep::Clients => Shape {
            clients: at,
            locks: args.locks,
        },
    };
    run_on(args, Primitive::Lock, shape, config, index, backend)
        .await
        .map(Measured::Workload)
        .map_err(|e| e.to_string())
}
