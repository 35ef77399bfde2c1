//! Contention benchmark: distlock-postgres's two layouts against the server's
//! own lock API, raw `pg_advisory_lock`/`pg_advisory_unlock` on a plain
//! connection, on one real PostgreSQL, in one run; then a fenced
//! transaction's latency against the same UPDATE in a plain transaction.
//!
//! Locks: for 1, 4 and 16 clients (each with its own connections, as
//! separate processes would have) on one lock name, hold 0, each lock runs
//! in short rounds that alternate with the others, so that all see the same
//! load. With 1 client a cycle is one uncontended acquire and release; with
//! more, the rate of real hand-offs (the holder changed to another client)
//! is the contended figure. Every critical section checks mutual exclusion
//! and token order. Server transactions per acquisition (from
//! `pg_stat_database`; every statement outside a transaction block is
//! one) say how much work the server does for each.
//!
//! The hand-off floor: between the rounds, single-statement one-row
//! `UPDATE`s on a plain connection time what one commit costs the server
//! (with the run's `fsync` setting), a round trip included. A hand-off of
//! the table layout needs one commit (the release, which grants the next
//! holder and waits for its flush; the waiter's queued attempt committed
//! before, unflushed), so the floor is `1 / commit p50`, and every lock's
//! hand-offs are shown against it.
//!
//! Fenced transactions: one client holds a lock of the table layout and
//! runs `BEGIN; UPDATE …; COMMIT` through `fenced_transaction` (which adds
//! the `FOR KEY SHARE` check of the holder's row) and the same three
//! statements plainly, in alternating rounds on one connection.
//!
//! Run: `cargo bench -p distlock-postgres --bench contention`. `BENCH_SECS`
//! sets each lock round's length (default 1.5), `BENCH_ROUNDS` the rounds
//! per row (default 5; rows show medians over rounds), `BENCH_CLIENTS` the
//! client counts (default `1,4,8,16`; `none` runs only the fenced part),
//! `BENCH_TX` the transactions per round and side (default 400), and
//! `BENCH_FSYNC=on` makes the server sync its commits (the test kit's
//! server runs with `fsync=off` otherwise).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Capabilities, DynLockBackend, Error, FencingStrength, LockBackendExt, LockName, Result,
};
use distlock_postgres::tokio_postgres::types::Type;
use distlock_postgres::tokio_postgres::{self, Client, NoTls};
use distlock_postgres::{Fence, Layout, PostgresBackend, PostgresConfig};
use distlock_testkit::floor::{self, Floor, FloorError};
use distlock_testkit::handoffs::Handoffs;
use distlock_testkit::peer::{PeerBackend, PeerLock};
use distlock_testkit::servers::{PostgresOptions, PostgresServer};
use distlock_testkit::workload::{
    ClientFactory, Progress, WorkloadConfig, WorkloadReport, run_workload,
};
use futures::FutureExt;
use tokio::time::Instant;

/// The TTL of every lock in the benchmark (no run holds a lock that long).
const TTL: Duration = Duration::from_secs(10);

/// Which lock a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Table,
    Advisory,
    Raw,
}

impl Contender {
    const ALL: [Contender; 3] = [Contender::Table, Contender::Advisory, Contender::Raw];

    fn label(self) -> &'static str {
        match self {
            Contender::Table => "distlock table layout",
            Contender::Advisory => "distlock advisory layout",
            Contender::Raw => "raw pg_advisory_lock",
        }
    }
}

/// The server's own lock, as a client of it would take it: one connection
/// per client, `pg_advisory_lock` on the hash of the name, then
/// `pg_advisory_unlock`. Its "token" is a process-wide counter taken after
/// the grant, only so that the workload's order check has something to
/// check; it costs no request.
#[derive(Debug)]
struct RawAdvisory {
    client: Arc<Client>,
}

static RAW_TOKENS: AtomicU64 = AtomicU64::new(0);

impl RawAdvisory {
    async fn connect(url: &str) -> Result<Self> {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| Error::backend(e.to_string()))?;
        tokio::spawn(connection);
        Ok(RawAdvisory {
            client: Arc::new(client),
        })
    }
}

#[async_trait]
impl PeerLock for RawAdvisory {
    type Grant = (Arc<Client>, String);

    async fn lock(&self, name: &LockName) -> Result<(u64, String, Self::Grant)> {
        let key = format!("raw/{name}");
        self.client
            .query_typed(
                "SELECT pg_advisory_lock(hashtextextended($1, 0))",
                &[(&key, Type::TEXT)],
            )
            .await
            .map_err(|e| Error::backend(e.to_string()))?;
        let token = RAW_TOKENS.fetch_add(1, Ordering::SeqCst) + 1;
        Ok((token, key.clone(), (self.client.clone(), key)))
    }

    async fn unlock((client, key): Self::Grant) -> Result<()> {
        let rows = client
            .query_typed(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                &[(&key, Type::TEXT)],
            )
            .await
            .map_err(|e| Error::backend(e.to_string()))?;
        match rows.first().map(|row| row.get::<_, bool>(0)) {
            Some(true) => Ok(()),
            _ => Err(Error::not_held(format!("{key} was not held"))),
        }
    }
}

/// The config of a benchmark client of `server`.
fn config_for(server: &PostgresServer, layout: Layout) -> PostgresConfig {
    PostgresConfig::from_url(&server.url())
        .expect("the server's URL")
        .with_ttl(TTL)
        .with_layout(layout)
}

/// One connected client of `contender`, its connections opened before the
/// clock starts (the table layout's pool opens its slots on first use).
async fn connect(server: &PostgresServer, contender: Contender) -> Result<Arc<DynLockBackend>> {
    Ok(match contender {
        Contender::Table => {
            let backend = PostgresBackend::connect(config_for(server, Layout::Table)).await?;
            let warm = format!("warm/{:016x}", rand_id());
            for _ in 0..2 {
                backend.try_lock(warm.as_str()).await?.release().await?;
            }
            Arc::new(backend)
        }
        Contender::Advisory => {
            Arc::new(PostgresBackend::connect(config_for(server, Layout::Advisory)).await?)
        }
        Contender::Raw => {
            let caps = Capabilities::new("pg-advisory-raw", FencingStrength::ProcessLocal);
            Arc::new(PeerBackend::new(
                RawAdvisory::connect(&server.url()).await?,
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

/// One round of one lock: the workload's report, the hand-offs per second
/// and the server's transactions per acquisition.
struct Round {
    report: WorkloadReport,
    handoffs: f64,
    transactions: f64,
}

/// Transactions the server has finished in the database so far (every
/// statement outside a transaction block is one). Sessions report theirs
/// when they go idle or end, so read it once the clients are gone.
async fn server_transactions(sql: &Client) -> f64 {
    let row = sql
        .query_one(
            "SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database \
             WHERE datname = current_database()",
            &[],
        )
        .await
        .expect("read pg_stat_database");
    row.get(0)
}

async fn run(
    server: &Arc<PostgresServer>,
    sql: &Client,
    contender: Contender,
    clients: usize,
    secs: f64,
    round: usize,
) -> Round {
    let handoffs = Handoffs::new();
    // Connect every client before counting: connecting is not acquiring.
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        let client = connect(server, contender)
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", contender.label()));
        connected.push(client);
    }
    let pool = Arc::new(std::sync::Mutex::new(connected));
    let factory: ClientFactory = Arc::new(move || {
        let next = pool.lock().unwrap().pop();
        async move { next.ok_or_else(|| Error::backend("no more pre-connected clients")) }.boxed()
    });
    let duration = Duration::from_secs_f64(secs);
    let factory = handoffs.counting(factory, duration);
    let config = WorkloadConfig {
        clients,
        locks: 1,
        duration,
        ttl: Some(TTL),
        hold: Duration::ZERO,
        name_prefix: format!("bench/{round}"),
        primitive: Default::default(),
    };
    // Let the sessions of the clients' connects report their transactions.
    tokio::time::sleep(STATS_SETTLE).await;
    let before = server_transactions(sql).await;
    let report = run_workload(&config, factory, Arc::new(Progress::default()))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", contender.label()));
    // The clients are gone with the workload: their sessions end and report.
    tokio::time::sleep(STATS_SETTLE).await;
    let after = server_transactions(sql).await;
    Round {
        handoffs: handoffs.total() as f64 / secs,
        transactions: (after - before) / report.acquisitions.max(1) as f64,
        report,
    }
}

/// How long sessions are given to report their statistics.
const STATS_SETTLE: Duration = Duration::from_millis(300);

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
    transactions: f64,
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
        transactions: pick(&|r| r.transactions),
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
    let rounds: usize = env("BENCH_ROUNDS", 5);
    let transactions: usize = env("BENCH_TX", 400);
    let fsync = std::env::var("BENCH_FSYNC").is_ok_and(|v| v == "on" || v == "1");
    let scenarios: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 8, 16]);
    let server = Arc::new(
        PostgresServer::start_with(PostgresOptions::new().fsync(fsync))
            .await
            .unwrap_or_else(|e| panic!("cannot start postgres: {e}")),
    );
    let (sql, connection) = tokio_postgres::connect(&server.url(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    println!(
        "# distlock-postgres contention benchmark\n\none lock name, hold 0, {rounds} alternating rounds of {secs} s per row, medians; \
         fsync={}; load average at start {}\n",
        if fsync { "on" } else { "off" },
        load_average()
    );
    println!(
        "| lock | clients | acquisitions/s | handoffs/s | p50 wait | p99 wait | p50 release | p50 hand-off | server transactions/acq | fairness | violations | token regressions | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    sql.batch_execute(
        "CREATE TABLE bench_commits (id int PRIMARY KEY, n bigint NOT NULL); \
         INSERT INTO bench_commits VALUES (1, 0)",
    )
    .await
    .expect("create the commit table");
    let mut ratios = Vec::new();
    let mut errors = Vec::new();
    let mut floor_rows = Vec::new();
    let mut floor_lines = Vec::new();
    let mut round = 0;
    for &clients in &scenarios {
        let mut results: [Vec<Round>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        let mut floor = Floor::new();
        for i in 0..rounds {
            sample_floor(&sql, &mut floor, COMMITS_PER_ROUND)
                .await
                .unwrap_or_else(|e| panic!("floor: {e}"));
            // Rotate the order, so no lock always runs first on a machine
            // whose load drifts.
            for k in 0..Contender::ALL.len() {
                let which = (i + k) % Contender::ALL.len();
                round += 1;
                let r = run(&server, &sql, Contender::ALL[which], clients, secs, round).await;
                results[which].push(r);
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
                "| {} | {clients} | {:.0} | {handoffs} | {} | {} | {} | {handoff_p50} | {:.1} | {:.2} | {} | {} | {} |",
                contender.label(),
                s.per_second,
                ms(s.p50_us),
                ms(s.p99_us),
                ms(s.release_p50_us),
                s.transactions,
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
        for (contender, s) in Contender::ALL.iter().zip(&summaries) {
            floor_rows.push(floor.row(contender.label(), clients, s.handoffs));
        }
        floor_lines.push(format!("{clients} client(s): {floor}"));
        let raw = &summaries[2];
        for (contender, s) in Contender::ALL.iter().zip(&summaries).take(2) {
            let (cycle, handoffs) = if clients == 1 {
                (
                    format!("{:.2}", raw.per_second / s.per_second.max(1e-9)),
                    "–".to_owned(),
                )
            } else {
                (
                    "–".to_owned(),
                    format!("{:.2}", s.handoffs / raw.handoffs.max(1e-9)),
                )
            };
            ratios.push(format!(
                "| {} | {clients} | {:.2} | {cycle} | {handoffs} | {:.2} | {:.2} |",
                contender.label(),
                s.per_second / raw.per_second.max(1e-9),
                s.p50_us / raw.p50_us.max(1.0),
                s.p99_us / raw.p99_us.max(1.0),
            ));
        }
    }
    println!("\n## Ratios against raw pg_advisory_lock (same run)\n");
    println!(
        "| lock | clients | acquisitions/s | acquire + release time (1 client) | handoffs/s | p50 wait | p99 wait |"
    );
    println!("|---|---|---|---|---|---|---|");
    for line in ratios {
        println!("{line}");
    }
    floor::print_section(
        "Against the hand-off floor (one commit per hand-off of the table layout, timed between the rounds)",
        &floor_rows,
        &floor_lines,
    );
    if !errors.is_empty() {
        println!("\nfirst errors:");
        for line in errors {
            println!("{line}");
        }
    }

    fenced(&server, rounds, transactions).await;
    println!("\nload average at the end {}", load_average());
}

/// Single-statement commits timed between the lock rounds.
const COMMITS_PER_ROUND: usize = 100;

/// Times `n` autocommitted one-row `UPDATE`s: one round trip and one
/// commit each, the one commit a hand-off of the table layout needs.
async fn sample_floor(sql: &Client, floor: &mut Floor, n: usize) -> Result<(), FloorError> {
    const UPDATE: &str = "UPDATE bench_commits SET n = n + 1 WHERE id = 1";
    floor
        .time("one-row UPDATE commit", n, async || {
            sql.batch_execute(UPDATE).await
        })
        .await
}

/// The latencies of `n` transactions of one kind, in µs.
async fn transactions(
    backend: &PostgresBackend,
    client: &mut Client,
    fence: Option<&Fence>,
    n: usize,
) -> Vec<f64> {
    const UPDATE: &str = "UPDATE bench_ledger SET total = total + 1 WHERE id = 1";
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        match fence {
            Some(fence) => backend
                .fenced_transaction(client, fence, |tx| {
                    Box::pin(async move { tx.execute(UPDATE, &[]).await })
                })
                .await
                .map(drop)
                .expect("fenced transaction"),
            None => {
                let tx = client.transaction().await.expect("begin");
                tx.execute(UPDATE, &[]).await.expect("update");
                tx.commit().await.expect("commit");
            }
        }
        took.push(start.elapsed().as_secs_f64() * 1e6);
    }
    took
}

fn percentile(mut values: Vec<f64>, p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * p).round() as usize]
}

/// A fenced transaction's latency against the same statements unfenced.
async fn fenced(server: &PostgresServer, rounds: usize, n: usize) {
    let backend = PostgresBackend::connect(config_for(server, Layout::Table))
        .await
        .expect("connect");
    let (mut client, connection) = tokio_postgres::connect(&server.url(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE bench_ledger (id int PRIMARY KEY, total bigint NOT NULL); \
             INSERT INTO bench_ledger VALUES (1, 0)",
        )
        .await
        .expect("create the ledger");
    let guard = backend.lock("fenced/ledger").await.expect("lock");
    let fence = Fence::of(&guard);
    // Warm both paths up (connections, plans) before measuring.
    transactions(&backend, &mut client, Some(&fence), 20).await;
    transactions(&backend, &mut client, None, 20).await;
    let mut p50 = [Vec::new(), Vec::new()];
    let mut p99 = [Vec::new(), Vec::new()];
    for i in 0..rounds {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let fence = (side == 0).then_some(&fence);
            let took = transactions(&backend, &mut client, fence, n).await;
            p50[side].push(percentile(took.clone(), 0.5));
            p99[side].push(percentile(took, 0.99));
        }
    }
    let total: i64 = client
        .query_one("SELECT total FROM bench_ledger WHERE id = 1", &[])
        .await
        .expect("read the ledger")
        .get(0);
    assert_eq!(total as usize, 40 + 2 * rounds * n, "lost or extra updates");
    guard.release().await.expect("release");
    let [fenced50, plain50] = p50.map(median);
    let [fenced99, plain99] = p99.map(median);
    println!(
        "\n## Fenced transaction: BEGIN, one UPDATE, COMMIT ({rounds} alternating rounds of {n} per side, medians of the rounds' percentiles)\n"
    );
    println!("| transaction | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| fenced_transaction (adds the FOR KEY SHARE check) | {} | {} |",
        ms(fenced50),
        ms(fenced99)
    );
    println!("| plain transaction | {} | {} |", ms(plain50), ms(plain99));
    println!(
        "| **fenced / plain** | **{:.2}** | **{:.2}** |",
        fenced50 / plain50.max(1e-9),
        fenced99 / plain99.max(1e-9)
    );
    println!("\nthe ledger's total: {total} (every update counted once)");
}
