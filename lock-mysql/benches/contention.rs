//! Contention benchmark: distlock-mysql's two layouts against the server's
//! own lock API, raw `GET_LOCK`/`RELEASE_LOCK` on a plain connection, on
//! one real MariaDB, in one run.
//!
//! For 1, 4 and 8 clients (each with its own connections, as separate
//! processes would have) on one lock name, hold 0, each lock runs in short
//! rounds that alternate with the others, so that all see the same load.
//! With 1 client a cycle is one uncontended acquire and release; with more,
//! the rate of real hand-offs (the holder changed to another client) is the
//! contended figure. Every critical section checks mutual exclusion and
//! token order.
//!
//! Run: `cargo bench -p distlock-mysql --bench contention`. `BENCH_SECS`
//! sets each round's length (default 1.5), `BENCH_ROUNDS` the rounds per
//! row (default 3; rows show medians over rounds), `BENCH_CLIENTS` the
//! client counts (default `1,4,8`), and `BENCH_DURABLE=on` makes the
//! server flush every commit (`innodb_flush_log_at_trx_commit=1`; the test
//! kit's server runs with `2` otherwise: written at commit, flushed once a
//! second).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Capabilities, DynLockBackend, Error, FencingStrength, LockBackendExt, LockName, Result,
};
use distlock_mysql::mysql_async::prelude::Queryable;
use distlock_mysql::mysql_async::{self, Conn};
use distlock_mysql::{Layout, MysqlBackend, MysqlConfig};
use distlock_testkit::handoffs::Handoffs;
use distlock_testkit::peer::{PeerBackend, PeerLock};
use distlock_testkit::servers::{MariadbOptions, MariadbServer};
use distlock_testkit::workload::{
    ClientFactory, Progress, WorkloadConfig, WorkloadReport, run_workload,
};
use futures::FutureExt;
use tokio::sync::Mutex;

/// The TTL of every lock in the benchmark (no run holds a lock that long).
const TTL: Duration = Duration::from_secs(10);

/// Which lock a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Table,
    Named,
    Raw,
}

impl Contender {
    const ALL: [Contender; 3] = [Contender::Table, Contender::Named, Contender::Raw];

    fn label(self) -> &'static str {
        match self {
            Contender::Table => "distlock table layout",
            Contender::Named => "distlock named layout",
            Contender::Raw => "raw GET_LOCK",
        }
    }
}

/// The server's own lock, as a client of it would take it: one TCP connection
/// per client, `GET_LOCK(name, a year)`, then `RELEASE_LOCK`. Its "token" is
/// a process-wide counter taken after the grant, only so that the
/// workload's order check has something to check; it costs no request.
#[derive(Debug)]
struct RawGetLock {
    conn: Arc<Mutex<Conn>>,
}

static RAW_TOKENS: AtomicU64 = AtomicU64::new(0);

fn driver(e: mysql_async::Error) -> Error {
    Error::backend(e.to_string())
}

fn driver_url(e: mysql_async::UrlError) -> Error {
    Error::backend(e.to_string())
}

#[async_trait]
impl PeerLock for RawGetLock {
    type Grant = (Arc<Mutex<Conn>>, String);

    async fn lock(&self, name: &LockName) -> Result<(u64, String, Self::Grant)> {
        let key = format!("raw/{name}");
        let got: Option<Option<i64>> = self
            .conn
            .lock()
            .await
            .exec_first("SELECT GET_LOCK(?, 31536000)", (&key,))
            .await
            .map_err(driver)?;
        if got.flatten() != Some(1) {
            return Err(Error::backend(format!("GET_LOCK({key}) failed")));
        }
        let token = RAW_TOKENS.fetch_add(1, Ordering::SeqCst) + 1;
        Ok((token, key.clone(), (self.conn.clone(), key)))
    }

    async fn unlock((conn, key): Self::Grant) -> Result<()> {
        let released: Option<Option<i64>> = conn
            .lock()
            .await
            .exec_first("SELECT RELEASE_LOCK(?)", (&key,))
            .await
            .map_err(driver)?;
        match released.flatten() {
            Some(1) => Ok(()),
            _ => Err(Error::not_held(format!("{key} was not held"))),
        }
    }
}

/// The config of a benchmark client of `server`.
fn config_for(server: &MariadbServer, layout: Layout) -> MysqlConfig {
    MysqlConfig::from_url(&server.url())
        .expect("the server's URL")
        .with_ttl(TTL)
        .with_layout(layout)
}

/// One connected client of `contender`, its connections opened before the
/// clock starts.
async fn connect(server: &MariadbServer, contender: Contender) -> Result<Arc<DynLockBackend>> {
    Ok(match contender {
        Contender::Table | Contender::Named => {
            let layout = if contender == Contender::Table {
                Layout::Table
            } else {
                Layout::Named
            };
            let backend = MysqlBackend::connect(config_for(server, layout)).await?;
            let warm = format!("warm/{:016x}", rand_id());
            for _ in 0..2 {
                backend.try_lock(warm.as_str()).await?.release().await?;
            }
            Arc::new(backend)
        }
        Contender::Raw => {
            let caps = Capabilities::new("mysql-get-lock-raw", FencingStrength::ProcessLocal);
            // TCP like distlock's connections: the driver would otherwise
            // switch a loopback URL to the server's unix socket, a cheaper
            // transport than the one being compared.
            let opts = mysql_async::Opts::from_url(&server.url()).map_err(driver_url)?;
            let opts = mysql_async::OptsBuilder::from_opts(opts)
                .prefer_socket(false)
                .tcp_nodelay(true);
            let conn = Conn::new(opts).await.map_err(driver)?;
            Arc::new(PeerBackend::new(
                RawGetLock {
                    conn: Arc::new(Mutex::new(conn)),
                },
                caps,
                TTL,
            ))
        }
    })
}

/// A process-unique number for names that must not collide.
fn rand_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 32)
}

/// One round of one lock: the workload's report and the hand-offs per second.
struct Round {
    report: WorkloadReport,
    handoffs: f64,
}

async fn run(
    server: &MariadbServer,
    contender: Contender,
    clients: usize,
    secs: f64,
    round: usize,
) -> Round {
    let handoffs = Handoffs::new();
    // Connect every client before counting: connecting is not acquiring.
    let mut connected = Vec::with_capacity(clients);
    for id in 0..clients {
        let inner = connect(server, contender)
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", contender.label()));
        connected.push(handoffs.count(inner, id as u64));
    }
    let pool = Arc::new(std::sync::Mutex::new(connected));
    let factory: ClientFactory = Arc::new(move || {
        let next = pool.lock().unwrap().pop();
        async move { next.ok_or_else(|| Error::backend("no more pre-connected clients")) }.boxed()
    });
    let config = WorkloadConfig {
        clients,
        locks: 1,
        duration: Duration::from_secs_f64(secs),
        ttl: Some(TTL),
        hold: Duration::ZERO,
        name_prefix: format!("bench/{round}"),
        primitive: Default::default(),
    };
    let report = run_workload(&config, factory, Arc::new(Progress::default()))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", contender.label()));
    Round {
        handoffs: handoffs.total() as f64 / secs,
        report,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The medians over the rounds of one lock at one client count.
struct Summary {
    per_second: f64,
    handoffs: f64,
    p50_us: f64,
    p99_us: f64,
    release_p50_us: f64,
    handoff_p50_us: f64,
    fairness: f64,
    violations: u64,
    regressions: u64,
    errors: u64,
    first_error: Option<String>,
}

fn summarize(rounds: &[Round]) -> Summary {
    let pick = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    Summary {
        per_second: pick(&|r| r.report.per_second),
        handoffs: pick(&|r| r.handoffs),
        p50_us: pick(&|r| r.report.wait.p50_us as f64),
        p99_us: pick(&|r| r.report.wait.p99_us as f64),
        release_p50_us: pick(&|r| r.report.release.p50_us as f64),
        handoff_p50_us: pick(&|r| r.report.handoff.p50_us as f64),
        fairness: pick(&|r| r.report.fairness),
        violations: rounds.iter().map(|r| r.report.violations).sum(),
        regressions: rounds.iter().map(|r| r.report.token_regressions).sum(),
        errors: rounds.iter().map(|r| r.report.errors).sum(),
        first_error: rounds.iter().find_map(|r| r.report.first_error.clone()),
    }
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs: f64 = env("BENCH_SECS", 1.5);
    let rounds: usize = env("BENCH_ROUNDS", 3);
    let durable = std::env::var("BENCH_DURABLE").is_ok_and(|v| v == "on" || v == "1");
    let scenarios: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 8]);
    let server = MariadbServer::start_with(MariadbOptions::new().durable(durable))
        .await
        .unwrap_or_else(|e| panic!("cannot start mariadb: {e}"));
    println!(
        "# distlock-mysql contention benchmark\n\none lock name, hold 0, {rounds} alternating \
         rounds of {secs} s per row, medians; innodb_flush_log_at_trx_commit={}; load \
         average at start {}\n",
        if durable { 1 } else { 2 },
        load_average()
    );
    println!(
        "| lock | clients | acquisitions/s | handoffs/s | p50 wait | p99 wait | p50 release | p50 hand-off | fairness | violations | token regressions | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut ratios = Vec::new();
    let mut errors = Vec::new();
    let mut round = 0;
    for &clients in &scenarios {
        let mut results: [Vec<Round>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for i in 0..rounds {
            // Rotate the order, so no lock always runs first on a machine
            // whose load drifts.
            for k in 0..Contender::ALL.len() {
                let which = (i + k) % Contender::ALL.len();
                round += 1;
                results[which]
                    .push(run(&server, Contender::ALL[which], clients, secs, round).await);
            }
        }
        let summaries: Vec<Summary> = results.iter().map(|r| summarize(r)).collect();
        for (contender, s) in Contender::ALL.iter().zip(&summaries) {
            let (handoffs, handoff_p50) = if clients == 1 {
                ("–".to_owned(), "–".to_owned())
            } else {
                (format!("{:.0}", s.handoffs), ms(s.handoff_p50_us))
            };
            println!(
                "| {} | {clients} | {:.0} | {handoffs} | {} | {} | {} | {handoff_p50} | {:.2} | {} | {} | {} |",
                contender.label(),
                s.per_second,
                ms(s.p50_us),
                ms(s.p99_us),
                ms(s.release_p50_us),
                s.fairness,
                s.violations,
                s.regressions,
                s.errors,
            );
            if let Some(e) = &s.first_error {
                errors.push(format!("- {} × {clients}: {e}", contender.label()));
            }
            assert_eq!(
                s.violations,
                0,
                "{}: mutual exclusion violated",
                contender.label()
            );
        }
        let raw = &summaries[2];
        for (contender, s) in Contender::ALL.iter().zip(&summaries).take(2) {
            let handoffs = if clients == 1 {
                "–".to_owned()
            } else {
                format!("{:.2}", s.handoffs / raw.handoffs.max(1e-9))
            };
            ratios.push(format!(
                "| {} | {clients} | {:.2} | {handoffs} | {:.2} | {:.2} |",
                contender.label(),
                s.per_second / raw.per_second.max(1e-9),
                s.p50_us / raw.p50_us.max(1.0),
                s.p99_us / raw.p99_us.max(1.0),
            ));
        }
    }
    println!("\n## Ratios against raw GET_LOCK (same run)\n");
    println!("| lock | clients | acquisitions/s | handoffs/s | p50 wait | p99 wait |");
    println!("|---|---|---|---|---|---|");
    for line in ratios {
        println!("{line}");
    }
    if !errors.is_empty() {
        println!("\nFirst error of each row that had errors:\n");
        for line in errors {
            println!("{line}");
        }
    }
}
