//! Handoff benchmark: our revision-queue lock against etcd's server-side
//! Lock RPC, on the same single-member etcd in the same run.
//!
//! Run with `cargo bench -p distlock-etcd --bench contention`. `BENCH_SECS` sets
//! the length of each run (default 4 s). The peer is `etcd-client`'s
//! `lock()`/`unlock()`, each client with its own lease (kept alive in the
//! background), run as a `LockBackend` by `distlock_testkit::peer` so the same
//! workload runner measures both.
//!
//! Besides the rates it says where the time goes: the watch events etcd
//! sent per hand-off (`etcd_debugging_mvcc_events_total`), etcd's CPU per
//! hand-off (its `process_cpu_seconds_total`), this process's (the clients'), and how
//! busy the machine's cores were meanwhile (`/proc/stat`). A hand-off rate
//! bounded by the cores shows as a busy fraction near 100 %.
//!
//! And it sets both locks' hand-offs against the floor etcd sets: between
//! the rounds, `etcd-client` on a connection of its own times the two
//! requests one hand-off cannot do without, the releaser's delete Txn
//! (compared on the key's create revision) and the next holder's
//! linearizable range; the floor is `1 / (sum of their p50s)`.

use distlock_etcd::ClientConfig;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{Capabilities, Error, FencingStrength, LockName, Result};
use distlock_etcd::{EtcdBackend, EtcdConfig};
use distlock_testkit::floor::{self, Floor, FloorError};
use distlock_testkit::handoffs::Handoffs;
use distlock_testkit::peer::{PeerBackend, PeerLock};
use distlock_testkit::servers::EtcdCluster;
use distlock_testkit::servers::EtcdMember;
use distlock_testkit::workload::{
    MachineSample, ProcessSample, Progress, WorkloadConfig, WorkloadReport, client_factory,
    run_workload,
};
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LockOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(10);
/// Alternating rounds per scenario.
const ROUNDS: usize = 8;
const LABELS: [&str; 2] = ["ours (revision queue)", "peer (Lock RPC)"];
/// Timed calls of each floor request per round.
const FLOOR_SAMPLES: usize = 50;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0);
    let cluster = EtcdCluster::start(1)
        .await
        .unwrap_or_else(|e| panic!("could not start etcd: {e}"));
    let endpoints = cluster.endpoints();
    println!(
        "etcd at {endpoints:?}; {secs} s per scenario in {ROUNDS} alternating rounds, hold 0, one lock name\n"
    );

    let ours = {
        let endpoints = endpoints.clone();
        client_factory(move || {
            EtcdBackend::connect(EtcdConfig::new(endpoints.clone()).with_prefix("/bench-ours"))
        })
    };
    let peer = {
        let endpoints = endpoints.clone();
        client_factory(move || {
            let endpoints = endpoints.clone();
            async move {
                let caps = Capabilities::new("etcd-lock-rpc", FencingStrength::Strong);
                let peer = PeerLockRpc::connect(&endpoints).await?;
                Ok(PeerBackend::new(peer, caps.with_fifo(true), TTL))
            }
        })
    };

    // The machine is shared and noisy: alternate ours and the peer in
    // short rounds so both see the same load, and add the rounds up.
    let mut rows = Vec::new();
    let mut floors = Vec::new();
    let mut plain = Client::connect(&endpoints, None)
        .await
        .unwrap_or_else(|e| panic!("floor client: {e}"));
    let scenarios: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8]);
    for clients in scenarios {
        let mut totals: [Vec<WorkloadReport>; 2] = [Vec::new(), Vec::new()];
        let mut slow_watchers = [SlowWatchers::default(), SlowWatchers::default()];
        let mut cpu = [CpuUse::default(), CpuUse::default()];
        let mut handed = [0u64; 2];
        let mut floor = Floor::new();
        for round in 0..ROUNDS {
            sample_floor(&mut plain, &mut floor, FLOOR_SAMPLES)
                .await
                .unwrap_or_else(|e| panic!("floor: {e}"));
            for (which, factory) in [&ours, &peer].into_iter().enumerate() {
                let handoffs = Handoffs::new();
                let config = WorkloadConfig {
                    clients,
                    locks: 1,
                    duration: Duration::from_secs_f64(secs / ROUNDS as f64),
                    ttl: Some(TTL),
                    hold: Duration::ZERO,
                    name_prefix: format!("bench/{clients}/{round}"),
                    primitive: Default::default(),
                };
                let factory = handoffs.counting(factory.clone(), config.duration);
                let run = run_workload(&config, factory, Arc::new(Progress::default()));
                let before = CpuReading::take(cluster.member(0)).await;
                let (report, samples) = sample_slow_watchers(cluster.member(0), run).await;
                let after = CpuReading::take(cluster.member(0)).await;
                let report = report.unwrap_or_else(|e| panic!("{}: {e}", LABELS[which]));
                cpu[which].add(&before, &after, report.acquisitions);
                handed[which] += handoffs.total();
                totals[which].push(report);
                slow_watchers[which].add(samples);
            }
        }
        for (which, reports) in totals.into_iter().enumerate() {
            rows.push((
                LABELS[which],
                clients,
                combine(&reports, secs),
                slow_watchers[which],
                cpu[which],
            ));
            floors.push((
                LABELS[which],
                clients,
                handed[which] as f64 / secs,
                floor.clone(),
            ));
        }
    }

    println!(
        "{:<24} {:>7} {:>10} {:>9} {:>9} {:>11} {:>11} {:>11} {:>8} {:>13} {:>8} {:>6}",
        "lock",
        "clients",
        "handoffs/s",
        "p50 wait",
        "p99 wait",
        "p50 release",
        "p50 handoff",
        "p99 handoff",
        ">50 ms",
        "slow watchers",
        "fairness",
        "errors"
    );
    for (label, clients, r, slow, _) in &rows {
        println!(
            "{:<24} {:>7} {:>10.0} {:>7.2}ms {:>7.2}ms {:>9.2}ms {:>9.2}ms {:>9.2}ms {:>8} {:>13} {:>8.2} {:>6}",
            label,
            clients,
            r.per_second,
            r.wait.p50_us as f64 / 1000.0,
            r.wait.p99_us as f64 / 1000.0,
            r.release.p50_us as f64 / 1000.0,
            r.handoff.p50_us as f64 / 1000.0,
            r.handoff.p99_us as f64 / 1000.0,
            r.slow_handoffs,
            slow.to_string(),
            r.fairness,
            r.errors
        );
        assert_eq!(r.violations, 0, "{label}: mutual exclusion violated");
        assert_eq!(r.token_regressions, 0, "{label}: token went back");
        if let Some(e) = &r.first_error {
            println!("    first error: {e}");
        }
    }
    println!(
        "\nwhere the time goes, per hand-off (CPU at 10 ms resolution, summed over the rounds)"
    );
    println!(
        "{:<24} {:>7} {:>13} {:>14} {:>17} {:>14}",
        "lock", "clients", "watch events", "etcd CPU ms", "clients' CPU ms", "cores busy"
    );
    for (label, clients, _, _, cpu) in &rows {
        println!(
            "{:<24} {:>7} {:>13.1} {:>14.3} {:>17.3} {:>13.0}%",
            label,
            clients,
            cpu.events_per_handoff(),
            cpu.per_handoff(cpu.server),
            cpu.per_handoff(cpu.client),
            cpu.busy_share() * 100.0
        );
    }
    println!();
    for pair in rows.chunks(2) {
        let [(_, clients, ours, _, _), (_, _, peer, _, _)] = pair else {
            continue;
        };
        println!(
            "{clients} client(s): ours/peer = {:.2}x handoffs/s",
            ratio(ours, peer)
        );
    }
    floor::print_section(
        "Against the hand-off floor (hand-offs between clients; floor timed between the rounds)",
        &floors
            .iter()
            .map(|(label, clients, handoffs, floor)| floor.row(label, *clients, *handoffs))
            .collect::<Vec<_>>(),
        &floors
            .iter()
            .step_by(2)
            .map(|(_, clients, _, floor)| format!("{clients} client(s): {floor}"))
            .collect::<Vec<_>>(),
    );
}

const DELETE: &str = "delete Txn";
const RANGE: &str = "linearizable range";

/// Times `n` of each request one hand-off cannot do without, with the plain
/// client: the releaser's delete, compared on the key's create revision as
/// ours is, and the next holder's linearizable read of the newest key
/// ahead of it. The key is written before each delete, untimed.
async fn sample_floor(client: &mut Client, floor: &mut Floor, n: usize) -> Result<(), FloorError> {
    const KEY: &str = "/bench-floor/queue/holder";
    let mut kv = client.kv_client();
    let newest = || {
        GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
    };
    for _ in 0..n {
        let put = floor::within("put the key to delete", kv.put(KEY, "holder", None)).await?;
        let revision = put.header().map_or(0, |h| h.revision());
        let delete = Txn::new()
            .when([Compare::create_revision(KEY, CompareOp::Equal, revision)])
            .and_then([TxnOp::delete(KEY, None)]);
        let start = Instant::now();
        let deleted = floor::within(DELETE, kv.txn(delete)).await?;
        floor.record(DELETE, start.elapsed());
        if !deleted.succeeded() {
            return Err(FloorError::Call {
                step: DELETE,
                message: format!("the compare on create revision {revision} failed"),
            });
        }
        let start = Instant::now();
        floor::within(RANGE, kv.get("/bench-floor/queue/", Some(newest()))).await?;
        floor.record(RANGE, start.elapsed());
    }
    Ok(())
}

/// The rounds of one scenario as one report: summed counts, the worst
/// percentiles (conservative), and the fairness of the summed counts.
fn combine(reports: &[WorkloadReport], secs: f64) -> WorkloadReport {
    let mut total = WorkloadReport::default();
    for r in reports {
        total.acquisitions += r.acquisitions;
        total.errors += r.errors;
        total.violations += r.violations;
        total.token_regressions += r.token_regressions;
        total.slow_handoffs += r.slow_handoffs;
        total.first_error = total.first_error.take().or_else(|| r.first_error.clone());
        if total.per_client.len() < r.per_client.len() {
            total.per_client.resize(r.per_client.len(), 0);
        }
        for (sum, n) in total.per_client.iter_mut().zip(&r.per_client) {
            *sum += n;
        }
    }
    let mut p50: Vec<u64> = reports.iter().map(|r| r.wait.p50_us).collect();
    p50.sort_unstable();
    total.wait.p50_us = p50.get(p50.len() / 2).copied().unwrap_or(0);
    total.wait.p99_us = reports.iter().map(|r| r.wait.p99_us).max().unwrap_or(0);
    total.handoff.p99_us = reports.iter().map(|r| r.handoff.p99_us).max().unwrap_or(0);
    total.handoff.p50_us = median(reports.iter().map(|r| r.handoff.p50_us).collect());
    total.release.p50_us = median(reports.iter().map(|r| r.release.p50_us).collect());
    total.per_second = total.acquisitions as f64 / secs;
    let most = total.per_client.iter().copied().max().unwrap_or(0);
    let least = total.per_client.iter().copied().min().unwrap_or(0);
    total.fairness = if most == 0 {
        0.0
    } else {
        least as f64 / most as f64
    };
    total
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// etcd's `etcd_debugging_mvcc_slow_watcher_total` (watchers waiting for
/// its 100 ms unsynced loop), sampled during the runs.
#[derive(Debug, Default, Clone, Copy)]
struct SlowWatchers {
    samples: u32,
    nonzero: u32,
    max: f64,
}

impl SlowWatchers {
    fn add(&mut self, other: SlowWatchers) {
        self.samples += other.samples;
        self.nonzero += other.nonzero;
        self.max = self.max.max(other.max);
    }
}

impl std::fmt::Display for SlowWatchers {
    /// "samples above 0 / samples, max".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} max {}", self.nonzero, self.samples, self.max)
    }
}

/// Runs `work`, sampling etcd's slow-watcher gauge every 100 ms (the
/// period of the loop that drains it) meanwhile.
async fn sample_slow_watchers<T>(
    member: &distlock_testkit::servers::EtcdMember,
    work: impl std::future::Future<Output = T>,
) -> (T, SlowWatchers) {
    let mut samples = SlowWatchers::default();
    tokio::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => return (done, samples),
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                if let Ok(slow) = member.metric("etcd_debugging_mvcc_slow_watcher_total", &[]).await {
                    samples.samples += 1;
                    samples.nonzero += u32::from(slow > 0.0);
                    samples.max = samples.max.max(slow);
                }
            }
        }
    }
}

/// CPU counters at one moment: etcd's, this process's, and the machine's;
/// and the watch events etcd has sent.
struct CpuReading {
    server: Option<f64>,
    events: Option<f64>,
    client: Option<Duration>,
    machine: Option<MachineSample>,
}

impl CpuReading {
    async fn take(member: &EtcdMember) -> CpuReading {
        CpuReading {
            server: member.metric("process_cpu_seconds_total", &[]).await.ok(),
            events: member
                .metric("etcd_debugging_mvcc_events_total", &[])
                .await
                .ok(),
            client: ProcessSample::now().ok().map(|s| s.cpu),
            machine: MachineSample::now().ok(),
        }
    }
}

/// CPU spent during one side's rounds, and the hand-offs it bought.
#[derive(Debug, Default, Clone, Copy)]
struct CpuUse {
    /// etcd's CPU seconds.
    server: f64,
    /// Watch events etcd sent.
    events: f64,
    /// This process's CPU seconds.
    client: f64,
    /// Busy ticks, and all ticks, of the machine's cores.
    busy: u64,
    total: u64,
    handoffs: u64,
}

impl CpuUse {
    fn add(&mut self, before: &CpuReading, after: &CpuReading, handoffs: u64) {
        if let (Some(a), Some(b)) = (before.server, after.server) {
            self.server += b - a;
        }
        if let (Some(a), Some(b)) = (before.events, after.events) {
            self.events += b - a;
        }
        if let (Some(a), Some(b)) = (before.client, after.client) {
            self.client += b.saturating_sub(a).as_secs_f64();
        }
        if let (Some(a), Some(b)) = (before.machine, after.machine) {
            self.busy += b.busy.saturating_sub(a.busy);
            self.total += b.total.saturating_sub(a.total);
        }
        self.handoffs += handoffs;
    }

    fn per_handoff(&self, seconds: f64) -> f64 {
        seconds * 1000.0 / self.handoffs.max(1) as f64
    }

    fn events_per_handoff(&self) -> f64 {
        self.events / self.handoffs.max(1) as f64
    }

    fn busy_share(&self) -> f64 {
        self.busy as f64 / self.total.max(1) as f64
    }
}

fn ratio(ours: &WorkloadReport, peer: &WorkloadReport) -> f64 {
    if peer.per_second == 0.0 {
        f64::INFINITY
    } else {
        ours.per_second / peer.per_second
    }
}

/// etcd's server-side Lock RPC: one lease per client,
/// kept alive by a background task, used for every acquisition.
struct PeerLockRpc {
    client: Client,
    lease: i64,
    keepalive: tokio::task::JoinHandle<()>,
}

impl PeerLockRpc {
    async fn connect(endpoints: &[String]) -> Result<Self> {
        let fail = |e: etcd_client::Error| Error::unavailable(format!("peer: {e}"));
        let client = Client::connect(endpoints, None).await.map_err(fail)?;
        let secs = i64::try_from(TTL.as_secs()).unwrap_or(10);
        let lease = client
            .lease_client()
            .grant(secs, None)
            .await
            .map_err(fail)?
            .id();
        let (mut keeper, mut stream) = client
            .lease_client()
            .keep_alive(lease)
            .await
            .map_err(fail)?;
        let keepalive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(TTL / 3).await;
                if keeper.keep_alive().await.is_err() || stream.message().await.is_err() {
                    return;
                }
            }
        });
        Ok(PeerLockRpc {
            client,
            lease,
            keepalive,
        })
    }
}

impl std::fmt::Debug for PeerLockRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLockRpc")
            .field("lease", &self.lease)
            .finish()
    }
}

impl Drop for PeerLockRpc {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}

#[async_trait]
impl PeerLock for PeerLockRpc {
    /// A client to unlock with, and the key of the lock.
    type Grant = (Client, Vec<u8>);

    async fn lock(&self, name: &LockName) -> Result<(u64, String, Self::Grant)> {
        let mut lock_client = self.client.lock_client();
        let options = LockOptions::new().with_lease(self.lease);
        let response = lock_client
            .lock(name.as_str(), Some(options))
            .await
            .map_err(|e| Error::backend(format!("peer lock: {e}")))?;
        let token = response.header().map_or(0, |h| h.revision());
        let key = response.key().to_vec();
        Ok((
            u64::try_from(token).unwrap_or(0),
            String::from_utf8_lossy(&key).into_owned(),
            (self.client.clone(), key),
        ))
    }

    async fn unlock((client, key): Self::Grant) -> Result<()> {
        client
            .lock_client()
            .unlock(key)
            .await
            .map(|_| ())
            .map_err(|e| Error::backend(format!("peer unlock: {e}")))
    }
}
