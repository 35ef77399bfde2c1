//! The command line, declared with clap.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::defaults;
use crate::exit::{self, Topic};

fn duration(text: &str) -> Result<Duration, String> {
    distlock::parse_duration(text).map_err(|e| e.message().to_owned())
}

/// Distributed locks from the shell, on any backend: memory, file, etcd,
/// Redis, Redlock, ZooKeeper or PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "distlock",
    version,
    after_help = exit::help(Topic::All),
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) target: TargetArgs,

    /// Log more (-v: info, -vv: debug) on stderr; DISTLOCK_LOG takes a
    /// tracing filter.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Which backend, and how to reach it.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// Backend URL: file:///DIR, memory://, etcd://H:P, etcds://H:P,
    /// redis://H:P, rediss://H:P, redlock://H1:P,H2:P,H3:P,
    /// redis+cluster://H1:P,H2:P, rediss+cluster://H1:P,H2:P, zk://H:P,
    /// postgres://U@H:P/DB, mysql://U:PW@H:P/DB. Default: $DISTLOCK_URL, then the url in --config,
    /// then lock files in /var/tmp/distlock, shared by every user of the machine.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) url: Vec<String>,

    /// TOML config file with the settings `distlock --help` lists (tls.ca
    /// is `ca` in a [tls] table). DISTLOCK_* variables override it.
    #[arg(long, global = true, value_name = "FILE", env = "DISTLOCK_CONFIG")]
    pub(crate) config: Option<PathBuf>,

    /// Bound on connecting to the backend, e.g. 3s.
    #[arg(long, global = true, value_name = "DURATION", value_parser = duration)]
    pub(crate) connect_timeout: Option<Duration>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lock (like `etcdctl lock NAME CMD`).
    ///
    /// The lock is released when the command exits, and distlock exits with
    /// the command's status. If the lock is lost while the command runs, the
    /// command gets SIGTERM, then SIGKILL before the lock can pass to another
    /// holder, and distlock exits with 76. SIGINT and SIGTERM sent to
    /// distlock are forwarded to the command; sent while waiting, they give
    /// up the queue place and exit 130 or 143. Waiting says so on stderr
    /// when stderr is a terminal.
    ///
    /// The command's environment gets DISTLOCK_NAME (the lock's name),
    /// DISTLOCK_TOKEN (the fencing token: pass it to what you write to),
    /// DISTLOCK_KEY (the lock's key, node or file on the backend) and
    /// DISTLOCK_URL (the backend's URL, any password masked); the rest of
    /// distlock's environment is passed on unchanged.
    ///
    /// With --permits N it holds one of N permits of the semaphore NAME
    /// instead, with --shared the read side and with --exclusive the write
    /// side of the read-write lock NAME: a semaphore, a read-write lock and
    /// the mutex of one NAME are independent. A backend without semaphores
    /// or read-write locks refuses them (exit 64).
    #[command(after_help = exit::help(Topic::Run))]
    Run(RunArgs),
    /// Campaign for leadership and hold it until signalled, or follow the leaders.
    ///
    /// `distlock elect NAME [VALUE]` waits until elected, prints
    /// `elected name=NAME token=N value=VALUE` and holds the leadership until
    /// SIGINT or SIGTERM (then resigns, exit 0) or until it is lost (exit 76).
    /// `distlock elect --listen NAME` prints each new leader's value, one line
    /// per change, until signalled.
    #[command(after_help = exit::help(Topic::Elect))]
    Elect(ElectArgs),
    /// Run the contention workload against each --url and compare them.
    ///
    /// Give --url once per backend to compare (`bench` is the one command
    /// that takes several). Shows progress on stderr, prints a side-by-side table on stdout, and
    /// writes JSON (--json) and an SVG chart (--plot) on request. Each client
    /// has its own connection, as separate processes would.
    #[command(after_help = exit::help(Topic::Bench))]
    Bench(BenchArgs),
    /// Show who holds a lock, since when, how long its lease has left and
    /// who waits for it.
    ///
    /// Exits 0 when the lock is held and 1 when it is free, so scripts can
    /// test it. A name whose lock is unused but whose election is in use
    /// shows the election's leader.
    #[command(after_help = exit::help(Topic::Status))]
    Status(StatusArgs),
    /// List the locks and elections held or waited for, one per line
    /// (kind, name, holder's token, waiters); also the semaphores and
    /// read-write locks, on backends that report them.
    ///
    /// When nothing matches, stdout stays empty (so `distlock ls | wc -l`
    /// counts names), "no locks under PREFIX" goes to stderr, and the exit
    /// code is 0: an empty listing is an answer, not a failure.
    #[command(after_help = exit::help(Topic::Ls))]
    Ls(LsArgs),
    /// Break a lock whose holder is stuck: remove the holder and print the
    /// evicted token.
    ///
    /// The evicted holder's guard learns within its backend's detection
    /// bound (a `distlock run` holding it stops its command and exits 76),
    /// and the next holder's token is higher, so fenced writes of the
    /// evicted holder are rejected. Waiters keep their places. Needs --yes.
    #[command(name = "break", after_help = exit::help(Topic::Break))]
    Break(BreakArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print JSON (name, held, holder, waiting, waiters) instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// The lock's name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// Print a JSON array instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// Only names that start with this. Default: every name.
    #[arg(default_value = "")]
    pub(crate) prefix: String,
}

#[derive(Debug, Args)]
pub(crate) struct BreakArgs {
    /// Confirm: the holder loses the lock while it may still be working.
    #[arg(long)]
    pub(crate) yes: bool,

    /// The lock's name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration,
        help = defaults::ttl_help("Lease TTL, e.g. 10s.")
    )]
    pub(crate) ttl: Option<Duration>,

    /// Give up (exit 75) if the lock is not acquired within this long; 0 means
    /// do not wait. Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) wait: Option<Duration>,

    /// How long the command may take to exit once asked to: it gets SIGTERM
    /// when less than this is left of a lease that could not be renewed (or
    /// when the lock is lost), and SIGKILL before the lock can pass to
    /// another holder. At most half the TTL. Default: a quarter of the TTL.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) grace: Option<Duration>,

    /// Hold one of N permits of the semaphore NAME instead of the lock
    /// NAME: up to N commands run at once. The semaphore NAME is not the
    /// mutex NAME; every holder must give the same N.
    #[arg(long, value_name = "N", conflicts_with_all = ["shared", "exclusive"])]
    pub(crate) permits: Option<u32>,

    /// Hold the read side of the read-write lock NAME (not the mutex NAME):
    /// runs alongside other --shared holders, never with an --exclusive one.
    #[arg(long, conflicts_with = "exclusive")]
    pub(crate) shared: bool,

    /// Hold the write side of the read-write lock NAME (not the mutex
    /// NAME): runs alone, after the --shared holders ahead of it; --shared
    /// holders that come after it wait for it.
    #[arg(long)]
    pub(crate) exclusive: bool,

    /// The lock's name (the semaphore's with --permits, the read-write
    /// lock's with --shared or --exclusive).
    pub(crate) name: String,

    /// Words after NAME without a `--` before them: taken only to say where
    /// the `--` goes.
    #[arg(hide = true, allow_hyphen_values = true)]
    pub(crate) stray: Vec<OsString>,

    /// The command to run, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// Print each new leader's value instead of campaigning.
    #[arg(long)]
    pub(crate) listen: bool,

    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration,
        help = defaults::ttl_help("Lease TTL of the leadership, e.g. 10s.")
    )]
    pub(crate) ttl: Option<Duration>,

    /// The election's name.
    pub(crate) name: String,

    /// The value to publish as leader (default: HOSTNAME:PID).
    pub(crate) value: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 8)]
    pub(crate) clients: usize,

    /// Lock names the clients share (each client moves to the next name after
    /// every acquisition).
    #[arg(long, default_value_t = 1)]
    pub(crate) locks: usize,

    /// How long to run against each backend.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "5s")]
    pub(crate) duration: Duration,

    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration,
        help = defaults::bench_ttl_help()
    )]
    pub(crate) ttl: Option<Duration>,

    /// Time spent inside each critical section.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "0s")]
    pub(crate) hold: Duration,

    /// Lock names start with this, then the process id and the backend's
    /// place on the command line (`distlock-bench/4242-0/3`), so that
    /// benches of several people on one server use names of their own.
    /// DISTLOCK_PREFIX (or `prefix` in --config) is the backend's key
    /// prefix, for the backends that have one (etcd, Redis, ZooKeeper).
    #[arg(long, value_name = "PREFIX", default_value = "distlock-bench/")]
    pub(crate) prefix: String,

    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,

    /// Write a bar chart of the results as SVG to this file (its name must
    /// end in .svg).
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,

    /// What the clients contend on: the mutex, a semaphore (see --permits)
    /// or a read-write lock (see --read-ratio). A backend without the
    /// primitive gets an n/a row.
    #[arg(long, value_enum, default_value_t = BenchPrimitive::Lock)]
    pub(crate) primitive: BenchPrimitive,

    /// The semaphore's permits, with --primitive semaphore [default: 2].
    #[arg(long, value_name = "N")]
    pub(crate) permits: Option<u32>,

    /// The share of read-write lock acquisitions that read, between 0 and 1,
    /// with --primitive rwlock [default: 0.9].
    #[arg(long, value_name = "R")]
    pub(crate) read_ratio: Option<f64>,

    /// Measure cost as work grows instead: `held` holds --points locks at
    /// once on one client for --duration each (renewal traffic, client CPU
    /// and memory per held lock, lost locks); `names` runs --clients
    /// clients over --points names; `clients` runs --points clients on
    /// --locks names. One table per backend.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub(crate) sweep: Option<Sweep>,

    /// The sweep's points, comma-separated [default: held 1,100,1000,10000;
    /// names 1,10,100,1000; clients 1,4,16,64].
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        requires = "sweep"
    )]
    pub(crate) points: Vec<usize>,

    /// `--sweep held`: acquisitions and releases in flight at once.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "sweep")]
    pub(crate) concurrency: usize,

    /// `--sweep held`: a point whose locks are not all taken within this is
    /// reported as timed out, and the sweep goes on.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "120s", requires = "sweep")]
    pub(crate) acquire_within: Duration,

    /// `--sweep held`: measure the point in this process. Without it each
    /// point runs in a child process of its own (this flag set), so that no
    /// point reuses memory an earlier one freed.
    #[arg(long, hide = true, requires = "sweep")]
    pub(crate) in_process: bool,
}

/// What `distlock bench --sweep` grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Sweep {
    /// Locks held at once by one client.
    Held,
    /// Lock names shared by the clients.
    Names,
    /// Clients on the same names.
    Clients,
}

/// The primitives `distlock bench` can load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchPrimitive {
    /// The mutex.
    Lock,
    /// A semaphore.
    Semaphore,
    /// A read-write lock.
    Rwlock,
}
