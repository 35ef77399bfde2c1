//! `distlock bench`: the lock-testkit workload against each backend in turn.

mod chart;
mod outputs;
mod plot;
mod progress;
mod table;

use std::sync::Arc;

use distlock::{Capabilities, Config};
use futures::FutureExt;
use lock_workload::{ClientFactory, Progress, WorkloadConfig, WorkloadReport, run_workload};
use serde::Serialize;

use crate::cli::{BenchArgs, TargetArgs};
use crate::exit::{CANNOT_CREATE, Failure, UNAVAILABLE, USAGE};
use crate::target;
use outputs::Output;

/// One backend's outcome.
#[derive(Debug, Serialize)]
pub(crate) struct BackendResult {
    /// The URL, password masked.
    pub(crate) url: String,
    /// Short backend name from its capabilities (`file`, `etcd`, ...).
    pub(crate) backend: String,
    /// Declared fencing strength.
    pub(crate) fencing: String,
    /// Declared FIFO order.
    pub(crate) fifo: bool,
    /// The measurements, if the run worked.
    pub(crate) report: Option<WorkloadReport>,
    /// Why it did not, otherwise.
    pub(crate) error: Option<String>,
}

/// Everything `--json` writes.
#[derive(Debug, Serialize)]
pub(crate) struct BenchOutput {
    pub(crate) clients: usize,
    pub(crate) locks: usize,
    pub(crate) duration_ms: u128,
    pub(crate) hold_ms: u128,
    pub(crate) ttl_ms: Option<u128>,
    pub(crate) results: Vec<BackendResult>,
}

pub(crate) async fn bench(args: BenchArgs, target: &TargetArgs) -> Result<u8, Failure> {
    if args.clients == 0 || args.locks == 0 {
        return Err(Failure::usage("--clients and --locks must be at least 1"));
    }
    if args.duration.is_zero() {
        return Err(Failure::usage("--duration must be greater than zero"));
    }
    if let Some(ttl) = args.ttl {
        distlock::check_ttl(ttl)
            .map_err(|e| Failure::new(USAGE, format!("--ttl: {}", e.message())))?;
    }
    if let Some(path) = &args.plot {
        outputs::check_plot_name(path)?;
    }
    // Reject bad URLs before spending minutes on the good ones.
    let configs = target::configs(target)?;
    for config in &configs {
        let scheme = distlock::Scheme::of_url(&config.effective_url())?;
        scheme.ensure_compiled_in()?;
    }
    let json_file = args
        .json
        .as_deref()
        .map(|path| Output::create("--json", path))
        .transpose()?;
    let plot_file = args
        .plot
        .as_deref()
        .map(|path| Output::create("--plot", path))
        .transpose()?;
    let mut results = Vec::new();
    for (index, config) in configs.iter().enumerate() {
        results.push(bench_one(&args, config, index).await);
    }
    let output = BenchOutput {
        clients: args.clients,
        locks: args.locks,
        duration_ms: args.duration.as_millis(),
        hold_ms: args.hold.as_millis(),
        ttl_ms: args.ttl.map(|t| t.as_millis()),
        results,
    };
    print!("{}", table::render(&output));
    if let Some(file) = json_file {
        let json = serde_json::to_string_pretty(&output).expect("bench output serializes");
        file.write(&(json + "\n"))?;
    }
    if let Some(file) = plot_file {
        let svg = plot::render(&output).map_err(|e| {
            Failure::new(CANNOT_CREATE, format!("cannot draw the --plot chart: {e}"))
        })?;
        file.write(&svg)?;
    }
    let failed = output.results.iter().filter(|r| r.error.is_some()).count();
    let unsafe_runs = output
        .results
        .iter()
        .filter_map(|r| r.report.as_ref())
        .filter(|r| r.violations > 0)
        .count();
    if failed > 0 || unsafe_runs > 0 {
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "{failed} backend(s) failed and {unsafe_runs} violated mutual exclusion; see the table"
            ),
        ));
    }
    Ok(0)
}

/// Runs the workload against one backend; a backend that cannot be reached
/// gets a row with its error, and the others still run.
async fn bench_one(args: &BenchArgs, config: &Config, index: usize) -> BackendResult {
    let url = config.redacted_url();
    let (caps, outcome) = match distlock::connect_with(config).await {
        Ok(first) => {
            let caps = first.capabilities();
            drop(first);
            let outcome = run_on(args, config, index, caps.backend).await;
            (Some(caps), outcome)
        }
        Err(e) => (None, Err(e)),
    };
    if let Err(e) = &outcome {
        eprintln!("distlock: bench {url}: {e}");
    }
    BackendResult::new(url, caps, outcome)
}

impl BackendResult {
    /// `url`'s row; `caps` is `None` when it could not be connected to.
    fn new(
        url: String,
        caps: Option<Capabilities>,
        outcome: Result<WorkloadReport, distlock::Error>,
    ) -> Self {
        let backend = match &caps {
            Some(caps) => caps.backend,
            None => url.split("://").next().unwrap_or("?"),
        };
        BackendResult {
            backend: backend.to_owned(),
            fencing: caps
                .as_ref()
                .map_or_else(String::new, |caps| format!("{:?}", caps.fencing)),
            fifo: caps.is_some_and(|caps| caps.fifo),
            url,
            error: outcome.as_ref().err().map(ToString::to_string),
            report: outcome.ok(),
        }
    }
}

/// The workload on `config`'s backend (named `backend` on the progress
/// bar), each client with a connection of its own.
async fn run_on(
    args: &BenchArgs,
    config: &Config,
    index: usize,
    backend: &str,
) -> Result<WorkloadReport, distlock::Error> {
    let config = config.clone();
    let factory: ClientFactory = Arc::new(move || {
        let config = config.clone();
        async move { Ok(distlock::connect_with(&config).await?.lock_backend()) }.boxed()
    });
    let workload = WorkloadConfig {
        clients: args.clients,
        locks: args.locks,
        duration: args.duration,
        ttl: args.ttl,
        hold: args.hold,
        name_prefix: format!("distlock-bench/{}-{index}", std::process::id()),
    };
    let counter = Arc::new(Progress::default());
    let bar = progress::start(backend, args.duration, counter.clone());
    let outcome = run_workload(&workload, factory, counter).await;
    bar.finish();
    outcome
}
