//! Uncontended overhead: a backend's acquire + release cycle against a loop
//! that sends the same requests with the bare client, alternated in short
//! rounds so that both see the same machine load.
//!
//! Each side is a [`Cycle`]; [`compare`] times every acquire and release,
//! and [`print()`] shows cycles per second, cycle-time percentiles, the
//! p50 of each half, and the ratio of the two sides.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{LockBackend, LockBackendExt, LockGuard};
use tokio::time::Instant;

/// One client taking and giving back one free lock.
#[async_trait]
pub trait Cycle: Send {
    /// Takes the lock. An error counts against the side; the cycle's
    /// release is then skipped, so the side must clean up after itself.
    async fn acquire(&mut self) -> Result<(), String>;
    /// Gives the lock back.
    async fn release(&mut self) -> Result<(), String>;
}

/// A backend's cycle: `lock(name)` then `release()` of the guard.
#[derive(Debug)]
pub struct Ours<B> {
    backend: B,
    name: String,
    guard: Option<LockGuard>,
}

impl<B: LockBackend> Ours<B> {
    /// Cycles on lock `name` of `backend`.
    pub fn new(backend: B, name: &str) -> Self {
        Ours {
            backend,
            name: name.to_owned(),
            guard: None,
        }
    }
}

#[async_trait]
impl<B: LockBackend> Cycle for Ours<B> {
    async fn acquire(&mut self) -> Result<(), String> {
        let guard = self.backend.lock(&self.name).await;
        self.guard = Some(guard.map_err(|e| e.to_string())?);
        Ok(())
    }

    async fn release(&mut self) -> Result<(), String> {
        match self.guard.take() {
            Some(guard) => guard.release().await.map_err(|e| e.to_string()),
            None => Err("nothing to release".to_owned()),
        }
    }
}

/// Rounds and their length, from `BENCH_ROUNDS` (default 8) and
/// `BENCH_SECS` (seconds per side per round, default 1).
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Rounds; each runs both sides once, in alternating order.
    pub rounds: usize,
    /// How long each side runs per round.
    pub each: Duration,
}

impl Rounds {
    /// The settings from the environment.
    pub fn from_env() -> Self {
        let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<f64>().ok());
        Rounds {
            rounds: env("BENCH_ROUNDS").map_or(8, |n| n.max(1.0) as usize),
            each: Duration::from_secs_f64(env("BENCH_SECS").unwrap_or(1.0)),
        }
    }
}

/// What one side did over all rounds.
#[derive(Debug, Default, Clone)]
pub struct Side {
    /// Completed cycles (acquire and release both succeeded).
    pub cycles: u64,
    /// Time spent running this side.
    pub busy: Duration,
    /// Failed acquires or releases.
    pub errors: u64,
    /// The first of them.
    pub first_error: Option<String>,
    /// Cycles per second of each round.
    pub per_round: Vec<f64>,
    /// Nanoseconds per completed cycle, per acquire, per release.
    cycle_ns: Vec<u64>,
    acquire_ns: Vec<u64>,
    release_ns: Vec<u64>,
}

impl Side {
    /// Completed cycles per second of running time.
    pub fn per_second(&self) -> f64 {
        self.cycles as f64 / self.busy.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile (0..=1) of the cycle time.
    pub fn cycle(&self, q: f64) -> Duration {
        quantile(&self.cycle_ns, q)
    }

    /// The median acquire.
    pub fn acquire_p50(&self) -> Duration {
        quantile(&self.acquire_ns, 0.5)
    }

    /// The median release.
    pub fn release_p50(&self) -> Duration {
        quantile(&self.release_ns, 0.5)
    }

    fn fail(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    /// Runs `cycle` back to back for `length`.
    async fn run(&mut self, cycle: &mut dyn Cycle, length: Duration) {
        let start = Instant::now();
        let before = self.cycles;
        let end = start + length;
        while Instant::now() < end {
            let t0 = Instant::now();
            if let Err(e) = cycle.acquire().await {
                self.fail(e);
                continue;
            }
            let t1 = Instant::now();
            if let Err(e) = cycle.release().await {
                self.fail(e);
                continue;
            }
            let t2 = Instant::now();
            self.cycles += 1;
            self.acquire_ns.push(nanos(t1 - t0));
            self.release_ns.push(nanos(t2 - t1));
            self.cycle_ns.push(nanos(t2 - t0));
        }
        let took = start.elapsed();
        self.busy += took;
        self.per_round
            .push((self.cycles - before) as f64 / took.as_secs_f64().max(1e-9));
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn quantile(samples: &[u64], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    Duration::from_nanos(sorted[at])
}

/// Runs `ours` and `raw` for a short warm-up, then in `rounds`, each round
/// running both one after the other (the order alternates, so neither
/// always runs second on a machine whose load drifts).
pub async fn compare(ours: &mut dyn Cycle, raw: &mut dyn Cycle, rounds: Rounds) -> (Side, Side) {
    let warm_up = Duration::from_millis(300);
    Side::default().run(ours, warm_up).await;
    Side::default().run(raw, warm_up).await;
    let (mut o, mut r) = (Side::default(), Side::default());
    for round in 0..rounds.rounds {
        if round % 2 == 0 {
            o.run(ours, rounds.each).await;
            r.run(raw, rounds.each).await;
        } else {
            r.run(raw, rounds.each).await;
            o.run(ours, rounds.each).await;
        }
    }
    (o, r)
}

/// Prints the two sides as a Markdown table, and the ratio raw/ours of
/// cycles per second (1.0: no overhead; the target is at most 1.2).
pub fn print(labels: [&str; 2], sides: [&Side; 2]) {
    println!(
        "| loop | cycles | cycles/s | p50 cycle | p99 cycle | p50 acquire | p50 release | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
    for (label, side) in labels.iter().zip(sides) {
        println!(
            "| {label} | {} | {:.0} | {} | {} | {} | {} | {} |",
            side.cycles,
            side.per_second(),
            ms(side.cycle(0.5)),
            ms(side.cycle(0.99)),
            ms(side.acquire_p50()),
            ms(side.release_p50()),
            side.errors
        );
    }
    for (label, side) in labels.iter().zip(sides) {
        if let Some(e) = &side.first_error {
            println!("\nfirst error of {label}: {e}");
        }
    }
    let [ours, raw] = sides;
    // Each round's two runs are adjacent in time: their ratio is the
    // least affected by load that comes and goes.
    let mut rounds: Vec<f64> = (raw.per_round.iter().zip(&ours.per_round))
        .map(|(r, o)| r / o.max(1e-9))
        .collect();
    rounds.sort_by(f64::total_cmp);
    println!(
        "\nraw/ours cycles/s = {:.2}x; ours/raw p50 cycle = {:.2}x; per round {:.2}x median \
         ({:.2}..{:.2}) (target: at most 1.20x)",
        raw.per_second() / ours.per_second().max(1e-9),
        ours.cycle(0.5).as_secs_f64() / raw.cycle(0.5).as_secs_f64().max(1e-12),
        rounds.get(rounds.len() / 2).copied().unwrap_or(0.0),
        rounds.first().copied().unwrap_or(0.0),
        rounds.last().copied().unwrap_or(0.0),
    );
}
