//! One point of the held-locks sweep: one client takes N locks, holds them
//! for a fixed time while the backend renews them, and gives them back.
//! What holding costs is the difference of readings taken around the hold:
//! the server's request counter, and this process's CPU time and memory.

use std::time::Duration;

use distlock::Config;
use distlock_workload::{HoldConfig, ProcessSample, hold_many};
use serde::{Deserialize, Serialize};

use super::server::Counter;

/// What holding N locks cost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HeldReport {
    /// Locks held at once.
    pub(crate) locks: usize,
    /// Time to take them all.
    pub(crate) acquire_ms: u128,
    /// Time to give them all back.
    pub(crate) release_ms: u128,
    /// How long they were held, between the readings.
    pub(crate) hold_ms: u128,
    /// The lease TTL the backend granted.
    pub(crate) ttl_ms: u128,
    /// Locks no longer held at the end of the hold. Must be 0.
    pub(crate) lost: usize,
    /// Releases that failed.
    pub(crate) release_errors: usize,
    /// Requests the server received during the hold, if it could be read.
    pub(crate) server_requests: Option<u64>,
    /// What was counted, or why nothing was.
    pub(crate) server_counter: String,
    /// This process's CPU time during the hold.
    pub(crate) cpu_ms: u128,
    /// Resident memory at the end of the hold less before taking the locks.
    pub(crate) rss_growth_bytes: i64,
}

impl HeldReport {
    /// Server requests per held lock per renewal period (TTL/3): the goal is
    /// at most 1.
    pub(crate) fn requests_per_lock_per_period(&self) -> Option<f64> {
        let periods = self.hold_ms as f64 / (self.ttl_ms as f64 / 3.0);
        let requests = self.server_requests? as f64;
        (periods > 0.0).then(|| requests / self.locks as f64 / periods)
    }

    /// Client CPU per held lock per second of holding, in microseconds.
    pub(crate) fn cpu_us_per_lock_second(&self) -> f64 {
        let seconds = self.hold_ms as f64 / 1000.0;
        self.cpu_ms as f64 * 1000.0 / self.locks as f64 / seconds.max(1e-3)
    }

    /// Resident memory growth per held lock, in bytes: the goal is at most
    /// 4 KiB.
    pub(crate) fn rss_per_lock(&self) -> f64 {
        self.rss_growth_bytes as f64 / self.locks as f64
    }
}

/// Holds `locks` locks on a fresh client of `config` for `hold`.
pub(super) async fn measure(
    config: &Config,
    locks: usize,
    hold: Duration,
    mut settings: HoldConfig,
) -> Result<HeldReport, String> {
    settings.locks = locks;
    let client = distlock::connect_with(config)
        .await
        .map_err(|e| e.to_string())?
        .lock_backend();
    let counter = Counter::for_url(&config.effective_url());
    let sample = || ProcessSample::now().map_err(|e| e.to_string());
    let before = sample()?;
    let held = hold_many(&client, &settings)
        .await
        .map_err(|e| e.to_string())?;
    let ttl = held.ttl().unwrap_or_default();
    let requests_before = read(counter.as_ref()).await;
    let start = sample()?;
    let started = tokio::time::Instant::now();
    tokio::time::sleep(hold).await;
    let end = sample()?;
    let held_for = started.elapsed();
    let requests_after = read(counter.as_ref()).await;
    let lost = held.lost();
    let acquire_time = held.acquire_time;
    let released = held.release().await;
    let (server_requests, server_counter) = match (&counter, requests_before, requests_after) {
        (Some(c), Ok(a), Ok(b)) => (Some(b.saturating_sub(a)), c.counts().to_owned()),
        (None, ..) => (None, "no server".to_owned()),
        (Some(_), Err(e), _) | (Some(_), _, Err(e)) => (None, e),
    };
    Ok(HeldReport {
        locks,
        acquire_ms: acquire_time.as_millis(),
        release_ms: released.time.as_millis(),
        hold_ms: held_for.as_millis(),
        ttl_ms: ttl.as_millis(),
        lost,
        release_errors: released.errors,
        server_requests,
        server_counter,
        cpu_ms: end.cpu.saturating_sub(start.cpu).as_millis(),
        rss_growth_bytes: end.rss_bytes as i64 - before.rss_bytes as i64,
    })
}

async fn read(counter: Option<&Counter>) -> Result<u64, String> {
    match counter {
        Some(counter) => counter.read().await,
        None => Err("no server".to_owned()),
    }
}
