//! Contention benchmark: our Redis lock, in its fair (default) and non-fair
//! (`fair=false`) modes, against the naive textbook loop (`SET NX PX`,
//! sleep 1 ms, retry; owner-checked Lua delete), on one real Redis, in one
//! run.
//!
//! For 1 and 8 clients (each its own connections, as separate processes
//! would have) on one lock name, it reports acquisitions per second, real
//! handoffs per second (the holder changed to another client), wait
//! percentiles, the per-client spread, and server commands per acquisition
//! from `INFO commandstats` (reset before each run, after the clients
//! connected). A second table says where the time goes: release and
//! hand-off latency (a release to the next client's grant), the clients'
//! CPU per acquisition, and how busy the machine's cores were.
//!
//! A last table sets each lock's hand-offs against the floor Redis sets:
//! before each round, plain `redis` connections of their own time the two
//! steps one hand-off cannot do without, the release script (an `EVALSHA`
//! of an owner-checked `DEL` and a `PUBLISH`) and one pub/sub delivery (a
//! `PUBLISH` until the subscribed connection has the message); the floor is
//! `1 / (sum of their p50s)`. That sum counts the reply to the releaser,
//! which no waiter waits for, so a lock can pass it; the time from sending
//! the release script until its message arrives, timed as one chain, is
//! shown beside it.
//!
//! Run: `cargo bench -p distlock-redis --bench contention`
//! (`BENCH_SECS=N` sets the length of each run, default 2; `BENCH_ROUNDS=N`
//! the number of interleaved runs per row, default 5; rows show medians).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{HeldLock, LossNotifier};
use distlock_core::{
    AcquireOptions, Capabilities, DynLockBackend, Error, FencingStrength, FencingToken,
    LockBackend, LockGuard, LockName, LostReason, Result, Wait,
};
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testkit::floor::{self, Floor, FloorError};
use distlock_testkit::handoffs::Handoffs;
use distlock_testkit::servers::RedisServer;
use distlock_testkit::workload::{
    ClientFactory, MachineSample, ProcessSample, Progress, WorkloadConfig, WorkloadReport,
    run_workload,
};
use futures::{FutureExt, StreamExt};
use redis::aio::{MultiplexedConnection, PubSubStream};
use tokio::time::Instant;

/// The TTL of every lock in the benchmark (no run holds a lock that long).
const TTL: Duration = Duration::from_secs(10);

const NAIVE_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// The least a release can do: delete the key if it is still ours, and
/// publish to the next waiter.
const FLOOR_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
return 0
"#;

const RELEASE: &str = "release script (EVALSHA)";
const DELIVERY: &str = "pub/sub delivery";
const CHAIN: &str = "release script until its message arrives";
/// Timed calls of each floor step per round.
const FLOOR_SAMPLES: usize = 100;

/// Plain connections timing the floor: one for commands, one subscribed
/// to the channels the release script and the delivery publish to.
struct FloorClients {
    conn: MultiplexedConnection,
    release: redis::Script,
    messages: PubSubStream,
}

impl FloorClients {
    const KEY: &'static str = "floor:{lock}";
    const WOKEN: &'static str = "floor:woken";
    const DELIVERED: &'static str = "floor:delivered";

    async fn connect(server: &RedisServer) -> Result<Self, FloorError> {
        let client = redis::Client::open(server.url()).map_err(|e| FloorError::Call {
            step: "connect",
            message: e.to_string(),
        })?;
        let conn = floor::within("connect", client.get_multiplexed_async_connection()).await?;
        let mut pubsub = floor::within("connect pub/sub", client.get_async_pubsub()).await?;
        for channel in [Self::WOKEN, Self::DELIVERED] {
            floor::within("subscribe", pubsub.subscribe(channel)).await?;
        }
        let release = redis::Script::new(FLOOR_RELEASE);
        let mut warm = conn.clone();
        floor::within(
            "load the release script",
            release.prepare_invoke().load_async(&mut warm),
        )
        .await?;
        Ok(FloorClients {
            conn,
            release,
            messages: pubsub.into_on_message(),
        })
    }

    /// The next message on the subscribed connection.
    async fn next_message(&mut self) -> Result<redis::Msg, &'static str> {
        self.messages
            .next()
            .await
            .ok_or("the pub/sub connection closed")
    }

    /// Times `n` of each step into `floor`: the release script on a key set
    /// before it (untimed), then a `PUBLISH` until the subscriber has it.
    /// Into `chain` goes the time from sending the release script until the
    /// subscriber has its message: a hand-off's path, without the reply to
    /// the releaser that no waiter waits for.
    async fn sample(
        &mut self,
        floor: &mut Floor,
        chain: &mut Floor,
        n: usize,
    ) -> Result<(), FloorError> {
        let mut conn = self.conn.clone();
        for i in 0..n {
            let owner = format!("owner-{i}");
            let mut set = redis::cmd("SET");
            set.arg(Self::KEY).arg(&owner).arg("PX").arg(10_000);
            floor::within("set the key to release", set.exec_async(&mut conn)).await?;
            let mut invocation = self.release.key(Self::KEY);
            invocation.key(Self::WOKEN).arg(&owner);
            let start = Instant::now();
            let deleted: i64 = floor::within(RELEASE, invocation.invoke_async(&mut conn)).await?;
            floor.record(RELEASE, start.elapsed());
            if deleted != 1 {
                return Err(FloorError::Call {
                    step: RELEASE,
                    message: "the key was not ours".to_owned(),
                });
            }
            floor::within(CHAIN, self.next_message()).await?;
            chain.record(CHAIN, start.elapsed());
            let start = Instant::now();
            let mut publish = redis::cmd("PUBLISH");
            publish.arg(Self::DELIVERED).arg(&owner);
            let (published, received) = tokio::join!(
                floor::within(DELIVERY, publish.exec_async(&mut conn)),
                floor::within(DELIVERY, self.next_message()),
            );
            floor.record(DELIVERY, start.elapsed());
            published?;
            received?;
        }
        Ok(())
    }
}

/// The textbook Redis lock, with an owner check: `SET NX PX`
/// with a random value, 1 ms sleep between failed tries, Lua
/// compare-and-delete. Its "token" is a process-wide counter taken after the
/// SET succeeded, only so the workload's order check has something to check;
/// it costs no server command.
#[derive(Debug, Clone)]
struct NaiveBackend {
    conn: MultiplexedConnection,
    release: Arc<redis::Script>,
    tokens: Arc<AtomicU64>,
}

#[async_trait]
impl LockBackend for NaiveBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new("naive-redis", FencingStrength::ProcessLocal)
    }

    fn default_ttl(&self) -> Duration {
        TTL
    }

    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<LockGuard> {
        let ttl = options.effective_ttl(TTL)?;
        let deadline = options.wait.deadline_from(Instant::now());
        let key = format!("naive:{{{name}}}");
        let owner = format!("{:032x}", rand::random::<u128>());
        let mut conn = self.conn.clone();
        loop {
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&owner)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .query_async(&mut conn)
                .await
                .map_err(|e| Error::backend(e.to_string()))?;
            if set.is_some() {
                let token = self.tokens.fetch_add(1, Ordering::SeqCst) + 1;
                let notifier = LossNotifier::new();
                let held = NaiveHeld {
                    conn: self.conn.clone(),
                    release: self.release.clone(),
                    key: key.clone(),
                    owner,
                    notifier: notifier.clone(),
                };
                return Ok(distlock_core::raw::session_guard(
                    name.clone(),
                    FencingToken(token),
                    key,
                    ttl,
                    notifier.signal(),
                    Box::new(held),
                    None,
                ));
            }
            match (options.wait, deadline) {
                (Wait::No, _) => return Err(Error::would_block("held")),
                (_, Some(d)) if Instant::now() >= d => return Err(Error::timeout("held")),
                _ => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }
}

#[derive(Debug)]
struct NaiveHeld {
    conn: MultiplexedConnection,
    release: Arc<redis::Script>,
    key: String,
    owner: String,
    notifier: LossNotifier,
}

#[async_trait]
impl HeldLock for NaiveHeld {
    async fn renew(&self) -> Result<()> {
        Err(Error::unsupported("the naive lock does not renew"))
    }

    async fn release(self: Box<Self>) -> Result<()> {
        let mut conn = self.conn.clone();
        let deleted: i64 = self
            .release
            .key(&self.key)
            .arg(&self.owner)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::backend(e.to_string()))?;
        self.notifier.fire(LostReason::Released);
        if deleted == 1 {
            Ok(())
        } else {
            Err(Error::not_held("naive lock was not ours"))
        }
    }

    fn abandon(self: Box<Self>) {}
}

/// Which lock a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Ours,
    NonFair,
    Naive,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::Ours => "distlock redis",
            Contender::NonFair => "distlock redis fair=false",
            Contender::Naive => "naive SET NX + 1 ms sleep",
        }
    }

    /// The commands this lock's clients send themselves; every other
    /// command in `commandstats` ran inside its Lua scripts.
    fn client_commands(self) -> &'static [&'static str] {
        match self {
            Contender::Ours | Contender::NonFair => &[
                "evalsha",
                "eval",
                "script|load",
                "subscribe",
                "unsubscribe",
                "ping",
            ],
            Contender::Naive => &["set", "evalsha", "eval", "script|load"],
        }
    }
}

/// Connects `n` clients of `contender` before the clock starts.
async fn connect_clients(
    server: &RedisServer,
    contender: Contender,
    n: usize,
) -> Vec<Arc<DynLockBackend>> {
    let mut clients: Vec<Arc<DynLockBackend>> = Vec::new();
    for _ in 0..n {
        match contender {
            Contender::Ours | Contender::NonFair => {
                let config = RedisConfig::new("127.0.0.1", server.port())
                    .with_default_ttl(TTL)
                    .with_fair(contender == Contender::Ours);
                clients.push(Arc::new(
                    RedisBackend::connect(config).await.expect("connect"),
                ));
            }
            Contender::Naive => {
                let client = redis::Client::open(server.url()).expect("client");
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                let release = Arc::new(redis::Script::new(NAIVE_RELEASE));
                let mut warm = conn.clone();
                release
                    .prepare_invoke()
                    .load_async(&mut warm)
                    .await
                    .expect("load");
                clients.push(Arc::new(NaiveBackend {
                    conn,
                    release,
                    tokens: NAIVE_TOKENS.clone(),
                }));
            }
        }
    }
    clients
}

static NAIVE_TOKENS: std::sync::LazyLock<Arc<AtomicU64>> =
    std::sync::LazyLock::new(|| Arc::new(AtomicU64::new(0)));

/// Calls per command, less the bench's own `INFO` and `CONFIG` calls.
async fn command_stats(server: &RedisServer) -> BTreeMap<String, u64> {
    let mut stats = server.command_stats().await.expect("INFO commandstats");
    stats.retain(|name, _| name != "info" && !name.starts_with("config"));
    stats
}

struct RunResult {
    report: WorkloadReport,
    /// This process's (the clients') CPU per acquisition, in µs.
    client_cpu_us: f64,
    /// The share of the machine's cores busy during the run.
    busy: f64,
    /// Holder changes per second.
    handoffs: f64,
    client_commands: f64,
    all_commands: f64,
    breakdown: String,
}

async fn run(
    server: &RedisServer,
    contender: Contender,
    clients: usize,
    secs: u64,
    round: usize,
) -> RunResult {
    let handoffs = Handoffs::new();
    let connected = connect_clients(server, contender, clients).await;
    let pool = Arc::new(std::sync::Mutex::new(connected));
    let factory: ClientFactory = Arc::new(move || {
        let pool = pool.clone();
        async move {
            pool.lock()
                .unwrap()
                .pop()
                .ok_or_else(|| Error::backend("no more pre-connected clients"))
        }
        .boxed()
    });
    let duration = Duration::from_secs(secs);
    let factory = handoffs.counting(factory, duration);
    let config = WorkloadConfig {
        clients,
        locks: 1,
        duration,
        ttl: Some(TTL),
        hold: Duration::ZERO,
        name_prefix: format!("bench-{round}"),
        primitive: Default::default(),
    };
    server
        .command(&["CONFIG", "RESETSTAT"])
        .await
        .expect("RESETSTAT");
    let machine = MachineSample::now().expect("/proc/stat");
    let process = ProcessSample::now().expect("/proc/self");
    let report = run_workload(&config, factory, Arc::new(Progress::default()))
        .await
        .expect("workload");
    let cpu = ProcessSample::now().expect("/proc/self").cpu - process.cpu;
    let busy = MachineSample::now()
        .expect("/proc/stat")
        .busy_since(&machine);
    // Let releases that were in flight at the end land before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stats = command_stats(server).await;
    let acquisitions = report.acquisitions.max(1) as f64;
    let sent: u64 = contender
        .client_commands()
        .iter()
        .filter_map(|c| stats.get(*c))
        .sum();
    let all: u64 = stats.values().sum();
    let breakdown = stats
        .iter()
        .map(|(name, calls)| format!("{name} {:.2}", *calls as f64 / acquisitions))
        .collect::<Vec<_>>()
        .join(", ");
    RunResult {
        client_cpu_us: cpu.as_secs_f64() * 1e6 / acquisitions,
        busy,
        handoffs: handoffs.total() as f64 / secs as f64,
        client_commands: sent as f64 / acquisitions,
        all_commands: all as f64 / acquisitions,
        breakdown,
        report,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The medians of several runs of one lock at one client count.
struct Summary {
    per_second: f64,
    handoffs: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    fairness: f64,
    client_commands: f64,
    all_commands: f64,
    spread: String,
    release_p50_us: f64,
    handoff_p50_us: f64,
    handoff_p99_us: f64,
    client_cpu_us: f64,
    busy: f64,
    violations: u64,
    regressions: u64,
    errors: u64,
}

fn summarize(runs: &[RunResult]) -> Summary {
    let pick = |f: &dyn Fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let spread = runs
        .iter()
        .map(|r| {
            let least = r.report.per_client.iter().min().copied().unwrap_or(0);
            let most = r.report.per_client.iter().max().copied().unwrap_or(0);
            format!("{least}..{most}")
        })
        .collect::<Vec<_>>()
        .join(" / ");
    Summary {
        per_second: pick(&|r| r.report.per_second),
        handoffs: pick(&|r| r.handoffs),
        p50_us: pick(&|r| r.report.wait.p50_us as f64),
        p99_us: pick(&|r| r.report.wait.p99_us as f64),
        max_us: pick(&|r| r.report.wait.max_us as f64),
        fairness: pick(&|r| r.report.fairness),
        client_commands: pick(&|r| r.client_commands),
        all_commands: pick(&|r| r.all_commands),
        spread,
        release_p50_us: pick(&|r| r.report.release.p50_us as f64),
        handoff_p50_us: pick(&|r| r.report.handoff.p50_us as f64),
        handoff_p99_us: pick(&|r| r.report.handoff.p99_us as f64),
        client_cpu_us: pick(&|r| r.client_cpu_us),
        busy: pick(&|r| r.busy),
        violations: runs.iter().map(|r| r.report.violations).sum(),
        regressions: runs.iter().map(|r| r.report.token_regressions).sum(),
        errors: runs.iter().map(|r| r.report.errors).sum(),
    }
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let server = RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    println!(
        "# distlock-redis contention benchmark\n\none lock name, hold 0, {rounds} interleaved runs of {secs} s per row, medians\n"
    );
    println!(
        "| lock | clients | acquisitions/s | handoffs/s | p50 wait | p99 wait | max wait | per-client min..max (each run) | fairness | client cmds/acq | all cmds/acq (incl. inside Lua) | violations | token regressions | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut round = 0;
    let mut ratios = Vec::new();
    let mut breakdowns = Vec::new();
    let mut costs = Vec::new();
    let mut floor_rows = Vec::new();
    let mut floor_lines = Vec::new();
    let mut plain = FloorClients::connect(&server)
        .await
        .unwrap_or_else(|e| panic!("floor: {e}"));
    const CONTENDERS: [Contender; 3] = [Contender::Ours, Contender::NonFair, Contender::Naive];
    for clients in [1, 8] {
        let mut runs: [Vec<RunResult>; 3] = Default::default();
        let (mut floor, mut chain) = (Floor::new(), Floor::new());
        for i in 0..rounds {
            plain
                .sample(&mut floor, &mut chain, FLOOR_SAMPLES)
                .await
                .unwrap_or_else(|e| panic!("floor: {e}"));
            // Rotate the order, so no lock always runs at the same point of
            // a round on a machine whose load drifts.
            for k in 0..CONTENDERS.len() {
                let slot = (i + k) % CONTENDERS.len();
                let contender = CONTENDERS[slot];
                round += 1;
                let r = run(&server, contender, clients, secs, round).await;
                if i == 0 {
                    breakdowns.push(format!(
                        "- {} × {clients}: {}",
                        contender.label(),
                        r.breakdown
                    ));
                }
                if let Some(e) = &r.report.first_error {
                    breakdowns.push(format!(
                        "  first error ({} × {clients}): {e}",
                        contender.label()
                    ));
                }
                runs[slot].push(r);
            }
        }
        let summaries: Vec<Summary> = runs.iter().map(|r| summarize(r)).collect();
        for (contender, s) in CONTENDERS.iter().zip(&summaries) {
            floor_rows.push(floor.row(contender.label(), clients, s.handoffs));
        }
        floor_lines.push(format!("{clients} client(s): {floor}"));
        let chain_shares = if clients < 2 {
            "–".to_owned()
        } else {
            CONTENDERS
                .iter()
                .zip(&summaries)
                .map(|(c, s)| format!("{} {:.2}", c.label(), chain.share(s.handoffs)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        floor_lines.push(format!(
            "{clients} client(s), as one chain: {chain}; of it: {chain_shares}"
        ));
        for (contender, s) in CONTENDERS.iter().zip(&summaries) {
            let handoffs = if clients == 1 {
                "–".to_owned()
            } else {
                format!("{:.0}", s.handoffs)
            };
            println!(
                "| {} | {clients} | {:.0} | {handoffs} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                contender.label(),
                s.per_second,
                ms(s.p50_us),
                ms(s.p99_us),
                ms(s.max_us),
                s.spread,
                s.fairness,
                s.client_commands,
                s.all_commands,
                s.violations,
                s.regressions,
                s.errors,
            );
        }
        for (contender, s) in CONTENDERS.iter().zip(&summaries) {
            costs.push(format!(
                "| {} | {clients} | {} | {} | {} | {:.0} µs | {:.0} % |",
                contender.label(),
                ms(s.release_p50_us),
                ms(s.handoff_p50_us),
                ms(s.handoff_p99_us),
                s.client_cpu_us,
                s.busy * 100.0,
            ));
        }
        let n = &summaries[2];
        for (contender, o) in CONTENDERS.iter().zip(&summaries).take(2) {
            let handoff_ratio = if clients == 1 {
                "–".to_owned()
            } else {
                format!("{:.2}", o.handoffs / n.handoffs.max(1e-9))
            };
            ratios.push(format!(
                "| {} | {clients} | {:.2} | {handoff_ratio} | {:.2} | {:.2} | {:.2} |",
                contender.label(),
                o.per_second / n.per_second.max(1e-9),
                o.p50_us / n.p50_us.max(1.0),
                o.p99_us / n.p99_us.max(1.0),
                o.client_commands / n.client_commands.max(1e-9),
            ));
        }
    }
    println!("\n## Ratios ours / naive (same run)\n");
    println!(
        "| lock | clients | acquisitions/s | handoffs/s | p50 wait | p99 wait | client cmds/acq |"
    );
    println!("|---|---|---|---|---|---|---|");
    for line in ratios {
        println!("{line}");
    }
    println!("\n## Where the time goes (medians)\n");
    println!(
        "| lock | clients | p50 release | p50 hand-off | p99 hand-off | clients' CPU per acquisition | cores busy |"
    );
    println!("|---|---|---|---|---|---|---|");
    for line in costs {
        println!("{line}");
    }
    println!("\n## Commands per acquisition, by command (first run of each row)\n");
    for line in breakdowns {
        println!("{line}");
    }
    floor::print_section(
        "Against the hand-off floor (medians of the runs' hand-offs; floor timed before each round)",
        &floor_rows,
        &floor_lines,
    );
}
