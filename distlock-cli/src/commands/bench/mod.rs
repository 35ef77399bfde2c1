//! `distlock bench`: the distlock-testkit workload against each backend in turn.

mod chart;
mod outputs;
mod plot;
mod progress;
mod sweep;
mod table;

use std::sync::Arc;

use distlock::{Capabilities, Config};
use distlock_workload::{
    ClientFactory, Primitive, Progress, WorkloadConfig, WorkloadReport, run_workload,
};
use futures::FutureExt;
use serde::Serialize;

use crate::cli::{BenchArgs, BenchPrimitive, TargetArgs};
use crate::exit::{Failure, UNAVAILABLE, USAGE};
use crate::target;
use outputs::Outputs;

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
    /// Whether the backend has the primitive under load; a row that does not
    /// apply neither runs nor fails the bench.
    pub(crate) applies: bool,
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
    pub(crate) primitive: Primitive,
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
    let primitive = primitive_of(&args)?;
    distlock::LockName::new(format!("{}0", args.prefix))
        .map_err(|e| Failure::usage(format!("--prefix {:?}: {}", args.prefix, e.message())))?;
    // Reject bad URLs before spending minutes on the good ones.
    let configs = target::configs(target)?;
    for config in &configs {
        let scheme = distlock::Scheme::of_url(&config.effective_url())?;
        scheme.ensure_compiled_in()?;
    }
    if let Some(what) = args.sweep {
        if primitive != Primitive::Lock {
            return Err(Failure::usage(
                "--sweep measures locks; leave out --primitive",
            ));
        }
        return sweep::run(&args, what, target.config.as_ref(), &configs).await;
    }
    let outputs = Outputs::create(&args)?;
    let mut results = Vec::new();
    for (index, config) in configs.iter().enumerate() {
        results.push(bench_one(&args, primitive, config, index).await);
    }
    let output = BenchOutput {
        clients: args.clients,
        locks: args.locks,
        duration_ms: args.duration.as_millis(),
        hold_ms: args.hold.as_millis(),
        ttl_ms: args.ttl.map(|t| t.as_millis()),
        primitive,
        results,
    };
    print!("{}", table::render(&output));
    outputs.write(&output, plot::render)?;
    let failed = (output.results.iter())
        .filter(|r| r.applies && r.error.is_some())
        .count();
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
                "{failed} backend(s) failed and {unsafe_runs} violated what the {} promises; see the table",
                output.primitive.as_str()
            ),
        ));
    }
    Ok(0)
}

/// The lock names of the run on the `index`th backend start with this:
/// `--prefix`, then this process and the backend, so that runs of two
/// people (or two backends on one server) never share a name.
pub(crate) fn names(args: &BenchArgs, index: usize) -> String {
    format!("{}{}-{index}", args.prefix, std::process::id())
}

/// The primitive the flags ask for; --permits and --read-ratio only go
/// with their own primitive.
fn primitive_of(args: &BenchArgs) -> Result<Primitive, Failure> {
    let primitive = match args.primitive {
        BenchPrimitive::Lock => Primitive::Lock,
        BenchPrimitive::Semaphore => Primitive::Semaphore {
            permits: args.permits.unwrap_or(2),
        },
        BenchPrimitive::Rwlock => Primitive::RwLock {
            read_ratio: args.read_ratio.unwrap_or(0.9),
        },
    };
    match primitive {
        Primitive::Semaphore { permits: 0 } => Err(Failure::usage("--permits must be at least 1")),
        Primitive::RwLock { read_ratio } if !(0.0..=1.0).contains(&read_ratio) => {
            Err(Failure::usage("--read-ratio must be between 0 and 1"))
        }
        _ if args.permits.is_some() && args.primitive != BenchPrimitive::Semaphore => {
            Err(Failure::usage("--permits goes with --primitive semaphore"))
        }
        _ if args.read_ratio.is_some() && args.primitive != BenchPrimitive::Rwlock => {
            Err(Failure::usage("--read-ratio goes with --primitive rwlock"))
        }
        primitive => Ok(primitive),
    }
}

/// What each name is, for titles: `lock(s)`, `semaphore(s) of 2 permits`,
/// `read-write lock(s), 90% reads`.
pub(crate) fn load_of(primitive: Primitive) -> String {
    match primitive {
        Primitive::Semaphore { permits } => format!("semaphore(s) of {permits} permits"),
        Primitive::RwLock { read_ratio } => {
            format!("read-write lock(s), {:.0}% reads", read_ratio * 100.0)
        }
        _ => "lock(s)".to_owned(),
    }
}

/// Whether a backend with `caps` has `primitive`.
fn has(caps: &Capabilities, primitive: Primitive) -> bool {
    match primitive {
        Primitive::Lock => true,
        Primitive::Semaphore { .. } => caps.semaphore,
        Primitive::RwLock { .. } => caps.rwlock,
    }
}

/// Runs the workload against one backend; a backend that cannot be reached
/// gets a row with its error, and the others still run.
async fn bench_one(
    args: &BenchArgs,
    primitive: Primitive,
    config: &Config,
    index: usize,
) -> BackendResult {
    let url = config.redacted_url();
    let (caps, outcome) = match distlock::connect_with(config).await {
        Ok(first) => {
            let caps = first.capabilities();
            drop(first);
            if !has(&caps, primitive) {
                let why = format!("the {} backend has no {}", caps.backend, primitive.as_str());
                let outcome = Err(distlock::Error::unsupported(why));
                return BackendResult::new(url, Some(caps), false, outcome);
            }
            let shape = Shape {
                clients: args.clients,
                locks: args.locks,
            };
            let outcome = run_on(args, primitive, shape, config, index, caps.backend).await;
            (Some(caps), outcome)
        }
        Err(e) => (None, Err(e)),
    };
    if let Err(e) = &outcome {
        eprintln!("distlock: bench {url}: {e}");
    }
    BackendResult::new(url, caps, true, outcome)
}

impl BackendResult {
    /// `url`'s row; `caps` is `None` when it could not be connected to.
    /// `applies` is false only for a backend without the primitive under
    /// load: every other error, `Unsupported` ones included (a setting the
    /// backend does not have), fails the bench.
    fn new(
        url: String,
        caps: Option<Capabilities>,
        applies: bool,
        outcome: Result<WorkloadReport, distlock::Error>,
    ) -> Self {
        let backend = match &caps {
            Some(caps) => caps.backend,
            None => url.split("://").next().unwrap_or("?"),
        };
        BackendResult {
            applies,
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

/// How many clients share how many names.
#[derive(Debug, Clone, Copy)]
struct Shape {
    clients: usize,
    locks: usize,
}

/// The workload on `config`'s backend (named `backend` on the progress
/// bar), each client with a connection of its own.
async fn run_on(
    args: &BenchArgs,
    primitive: Primitive,
    shape: Shape,
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
        clients: shape.clients,
        locks: shape.locks,
        duration: args.duration,
        ttl: args.ttl,
        hold: args.hold,
        name_prefix: names(args, index),
        primitive,
    };
    let counter = Arc::new(Progress::default());
    let bar = progress::start(backend, args.duration, counter.clone());
    let outcome = run_workload(&workload, factory, counter).await;
    bar.finish();
    outcome
}
