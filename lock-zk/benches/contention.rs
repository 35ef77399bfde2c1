//! Contention benchmark: our lock against `zookeeper-client`'s own lock
//! recipe, on one lock name, with 1 and 8 clients, in the same run against
//! the same standalone ZooKeeper.
//!
//! Run: `cargo bench -p distlock-zk --bench contention`. `BENCH_SECS` (default
//! 3) sets the length of one case, `BENCH_ROUNDS` (default 3) how many
//! interleaved rounds are run; the median round of each case is reported,
//! with its hand-off latency (a release to the next client's grant), the
//! clients' CPU per acquisition, and how busy the machine's cores were
//! during it, which says whether the rate was bounded by the CPU.
//!
//! Both locks' hand-offs are then set against the floor ZooKeeper sets:
//! before each round, `zookeeper-client` on a session of its own times the
//! two requests one hand-off cannot do without, the holder's `delete` and
//! the next waiter's `exists` once its watch fired; the floor is
//! `1 / (sum of their p50s)`, and each case's median round is shown against
//! it.

use distlock_zk::ClientConfig;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{Capabilities, Error, FencingStrength, LockName, Result};
use distlock_testkit::floor::{self, Floor, FloorError};
use distlock_testkit::handoffs::Handoffs;
use distlock_testkit::peer::{PeerBackend, PeerLock};
use distlock_testkit::servers::ZkEnsemble;
use distlock_testkit::workload::{
    ClientFactory, MachineSample, ProcessSample, Progress, WorkloadConfig, WorkloadReport,
    client_factory, run_workload,
};
use distlock_zk::{ZkBackend, ZkConfig, zk};
use tokio::time::Instant;

const SESSION: Duration = Duration::from_secs(10);

/// `zookeeper-client`'s lock recipe (`Client::lock` with Curator-style
/// prefixes). Its token is the node's sequence number, and release is its
/// drop (a background delete).
struct PeerRecipe {
    client: zk::Client,
}

impl fmt::Debug for PeerRecipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerRecipe")
    }
}

#[async_trait]
impl PeerLock for PeerRecipe {
    type Grant = std::sync::Mutex<zk::OwnedLockClient>;

    async fn lock(&self, name: &LockName) -> Result<(u64, String, Self::Grant)> {
        let dir = format!("/bench-peer/{}", name.as_str().replace('/', "_"));
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-")
            .map_err(|e| Error::backend(e.to_string()))?;
        let acls = zk::Acls::anyone_all();
        let lock_options = zk::LockOptions::new(acls)
            .with_ancestor_options(zk::CreateMode::Persistent.with_acls(acls))
            .map_err(|e| Error::backend(e.to_string()))?;
        let lock = self
            .client
            .lock(prefix, b"", lock_options)
            .await
            .map_err(|e| Error::backend(e.to_string()))?
            .into_owned();
        let path = lock.lock_path().to_owned();
        let sequence: u64 = path
            .rsplit('-')
            .next()
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_default();
        Ok((sequence, path, std::sync::Mutex::new(lock)))
    }

    async fn unlock(grant: Self::Grant) -> Result<()> {
        drop(grant);
        Ok(())
    }

    fn abandon(grant: Self::Grant) {
        std::mem::forget(grant);
    }
}

fn ours(servers: String) -> ClientFactory {
    client_factory(move || {
        let config = ZkConfig::new([servers.clone()])
            .with_prefix("/bench-ours")
            .with_session_timeout(SESSION);
        ZkBackend::connect(config)
    })
}

fn peer(servers: String) -> ClientFactory {
    client_factory(move || {
        let servers = servers.clone();
        async move {
            let client = zk::Client::connector()
                .with_session_timeout(SESSION)
                .connect(&servers)
                .await
                .map_err(|e| Error::unavailable(e.to_string()))?;
            let caps = Capabilities::new("zk-recipe", FencingStrength::Strong);
            Ok(PeerBackend::new(
                PeerRecipe { client },
                caps.with_fifo(true),
                SESSION,
            ))
        }
    })
}

/// What one round cost the machine.
#[derive(Debug, Clone, Copy)]
struct Cost {
    /// This process's (the clients') CPU per acquisition, in ms.
    client_cpu_ms: f64,
    /// The share of the machine's cores busy during the round.
    busy: f64,
}

/// One round of a case: the workload's report, what it cost, and the
/// hand-offs per second between different clients.
#[derive(Debug, Clone)]
struct Round {
    report: WorkloadReport,
    cost: Cost,
    handoffs: f64,
}

/// One round of a case.
async fn measure(label: &str, clients: usize, secs: u64, factory: ClientFactory) -> Round {
    let config = WorkloadConfig {
        clients,
        locks: 1,
        duration: Duration::from_secs(secs),
        name_prefix: format!("{label}-{clients}"),
        primitive: Default::default(),
        ..WorkloadConfig::default()
    };
    let machine = MachineSample::now().expect("/proc/stat");
    let process = ProcessSample::now().expect("/proc/self");
    let handoffs = Handoffs::new();
    let factory = handoffs.counting(factory, config.duration);
    let report = run_workload(&config, factory, Arc::new(Progress::default()))
        .await
        .unwrap_or_else(|e| panic!("{label} with {clients} clients: {e}"));
    let cpu = ProcessSample::now().expect("/proc/self").cpu - process.cpu;
    let cost = Cost {
        client_cpu_ms: cpu.as_secs_f64() * 1000.0 / report.acquisitions.max(1) as f64,
        busy: MachineSample::now()
            .expect("/proc/stat")
            .busy_since(&machine),
    };
    Round {
        report,
        cost,
        handoffs: handoffs.total() as f64 / secs as f64,
    }
}

/// The round with the median throughput of several.
fn median(mut rounds: Vec<Round>) -> Round {
    rounds.sort_by(|a, b| a.report.per_second.total_cmp(&b.report.per_second));
    rounds.swap_remove(rounds.len() / 2)
}

const DELETE: &str = "delete";
const EXISTS: &str = "exists";
/// Timed calls of each floor request per round.
const FLOOR_SAMPLES: usize = 50;

/// Times `n` of each request one hand-off cannot do without, with the plain
/// client: the holder's `delete` of its node (created before, untimed) and
/// the next waiter's `exists` of its own node.
async fn sample_floor(client: &zk::Client, floor: &mut Floor, n: usize) -> Result<(), FloorError> {
    const HOLDER: &str = "/bench-floor/holder";
    const WAITER: &str = "/bench-floor/waiter";
    let acls = zk::Acls::anyone_all();
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(acls);
    for _ in 0..n {
        floor::within(
            "create the node to delete",
            client.create(HOLDER, b"", &ephemeral),
        )
        .await?;
        let start = Instant::now();
        floor::within(DELETE, client.delete(HOLDER, None)).await?;
        floor.record(DELETE, start.elapsed());
        let start = Instant::now();
        let stat = floor::within(EXISTS, client.check_stat(WAITER)).await?;
        floor.record(EXISTS, start.elapsed());
        if stat.is_none() {
            return Err(FloorError::Call {
                step: EXISTS,
                message: format!("{WAITER} is gone"),
            });
        }
    }
    Ok(())
}

/// A session of its own for the floor, with the waiter's node in place.
async fn floor_client(servers: &str) -> Result<zk::Client, FloorError> {
    let client = floor::within(
        "connect",
        zk::Client::connector()
            .with_session_timeout(SESSION)
            .connect(servers),
    )
    .await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for path in ["/bench-floor", "/bench-floor/waiter"] {
        floor::within(
            "create the floor's nodes",
            client.create(path, b"", &persistent),
        )
        .await?;
    }
    Ok(client)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let secs = env("BENCH_SECS", 3);
    let rounds = env("BENCH_ROUNDS", 3) as usize;
    let server = ZkEnsemble::start(1)
        .await
        .unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let servers = server.connect_string();
    // Warm up the JVM and both code paths before measuring.
    measure("warmup-ours", 4, 1, ours(servers.clone())).await;
    measure("warmup-peer", 4, 1, peer(servers.clone())).await;
    let cases = [
        (1, "distlock-zk"),
        (1, "zookeeper-client recipe"),
        (8, "distlock-zk"),
        (8, "zookeeper-client recipe"),
    ];
    let mut results: Vec<Vec<Round>> = vec![Vec::new(); cases.len()];
    let plain = floor_client(&servers)
        .await
        .unwrap_or_else(|e| panic!("floor: {e}"));
    let mut floor = Floor::new();
    // Rounds interleave the cases so that background load hits all alike.
    for round in 0..rounds {
        sample_floor(&plain, &mut floor, FLOOR_SAMPLES)
            .await
            .unwrap_or_else(|e| panic!("floor: {e}"));
        for (i, (clients, label)) in cases.iter().enumerate() {
            let factory = if *label == "distlock-zk" {
                ours(servers.clone())
            } else {
                peer(servers.clone())
            };
            let round_result = measure(&format!("{label}-r{round}"), *clients, secs, factory).await;
            eprintln!(
                "round {round}: {label}, {clients} clients: {:.0}/s",
                round_result.report.per_second
            );
            results[i].push(round_result);
        }
    }
    println!("{rounds} rounds of {secs} s per case; median round shown");
    println!();
    println!(
        "| lock | clients | acquisitions/s (median) | all rounds | p50 wait | p99 wait | max wait | p50 release | p50 hand-off | p99 hand-off | hand-offs > 50 ms | clients' CPU per acquisition | cores busy | fairness | violations | token regressions | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rates = Vec::new();
    let mut floor_rows = Vec::new();
    for ((clients, label), reports) in cases.iter().zip(results) {
        let all: Vec<String> = reports
            .iter()
            .map(|round| format!("{:.0}", round.report.per_second))
            .collect();
        let Round {
            report: r,
            cost,
            handoffs,
        } = median(reports);
        floor_rows.push(floor.row(label, *clients, handoffs));
        let ms = |us: u64| us as f64 / 1000.0;
        println!(
            "| {label} | {clients} | {:.0} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {} | {:.3} ms | {:.0} % | {:.2} | {} | {} | {} |",
            r.per_second,
            all.join(", "),
            ms(r.wait.p50_us),
            ms(r.wait.p99_us),
            ms(r.wait.max_us),
            ms(r.release.p50_us),
            ms(r.handoff.p50_us),
            ms(r.handoff.p99_us),
            r.slow_handoffs,
            cost.client_cpu_ms,
            cost.busy * 100.0,
            r.fairness,
            r.violations,
            r.token_regressions,
            r.errors,
        );
        if let Some(e) = &r.first_error {
            println!("first error of {label} with {clients} clients: {e}");
        }
        rates.push(r.per_second);
    }
    println!();
    println!(
        "ours/peer throughput (medians): 1 client {:.2}x, 8 clients {:.2}x",
        rates[0] / rates[1],
        rates[2] / rates[3]
    );
    floor::print_section(
        "Against the hand-off floor (the median rounds' hand-offs between clients; floor timed before each round)",
        &floor_rows,
        &[floor.to_string()],
    );
}
