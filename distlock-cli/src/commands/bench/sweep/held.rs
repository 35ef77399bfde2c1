//! One point of the held-locks sweep: one client takes N locks, holds them
//! for a fixed time while the backend renews them, and gives them back.
//! What holding costs is the difference of readings taken around the hold:
//! the server's request counter, and this process's CPU time and memory.
//! The counter is also read every 100 ms during the hold, to show whether
//! the renewals arrive spread out or in bursts.

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
    /// The server's busiest 100 ms of the hold against its average 100 ms:
    /// 1 for requests spread evenly, about period / burst length for
    /// renewals sent in one burst each period.
    #[serde(default)]
    pub(crate) server_peak_to_mean: Option<f64>,
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
    let readings = match &counter {
        Some(counter) => every_window(counter, hold).await,
        None => {
            tokio::time::sleep(hold).await;
            Vec::new()
        }
    };
    let end = sample()?;
    let held_for = started.elapsed();
    let requests_after = read(counter.as_ref()).await;
    let lost = held.lost();
    let acquire_time = held.acquire_time;
    let released = held.release().await;
    let (server_requests, server_counter) = match (&counter, requests_before, requests_after) {
        (Some(c), Ok(a), Ok(b)) => (Some(b.saturating_sub(a)), c.counts().to_owned()),
        (None, ..) => (None, "server requests not counted".to_owned()),
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
        server_peak_to_mean: peak_to_mean(&readings),
        cpu_ms: end.cpu.saturating_sub(start.cpu).as_millis(),
        rss_growth_bytes: end.rss_bytes as i64 - before.rss_bytes as i64,
    })
}

async fn read(counter: Option<&Counter>) -> Result<u64, String> {
    match counter {
        Some(counter) => counter.read().await,
        None => Err("server requests not counted".to_owned()),
    }
}

/// How often the counter is read during the hold.
const WINDOW: Duration = Duration::from_millis(100);

/// Reads `counter` every [`WINDOW`] for `hold`: (seconds since the start,
/// requests so far) for every reading that succeeded.
async fn every_window(counter: &Counter, hold: Duration) -> Vec<(f64, u64)> {
    let start = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(WINDOW);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut readings = Vec::new();
    while start.elapsed() < hold {
        ticks.tick().await;
        if let Ok(count) = counter.read().await {
            readings.push((start.elapsed().as_secs_f64(), count));
        }
    }
    readings
}

/// The busiest window's request rate over the mean rate of `readings`.
fn peak_to_mean(readings: &[(f64, u64)]) -> Option<f64> {
    let (first, last) = (readings.first()?, readings.last()?);
    let mean = last.1.saturating_sub(first.1) as f64 / (last.0 - first.0);
    let peak = readings
        .windows(2)
        .map(|w| w[1].1.saturating_sub(w[0].1) as f64 / (w[1].0 - w[0].0).max(1e-3))
        .fold(0.0, f64::max);
    (mean > 0.0).then(|| peak / mean)
}

#[cfg(test)]
mod tests {
    use super::peak_to_mean;

    #[test]
    fn an_even_rate_is_one_and_a_burst_is_the_period_over_its_length() {
        let even: Vec<(f64, u64)> = (0..=100).map(|i| (i as f64 * 0.1, i * 10)).collect();
        assert!((peak_to_mean(&even).unwrap() - 1.0).abs() < 1e-9);
        // 1,000 requests in the first 100 ms of each 10 s.
        let burst: Vec<(f64, u64)> = (0..=200)
            .map(|i| (i as f64 * 0.1, 1000 * (i as u64).div_ceil(100)))
            .collect();
        let ratio = peak_to_mean(&burst).unwrap();
        assert!((ratio - 100.0).abs() < 1e-6, "{ratio}");
        assert_eq!(peak_to_mean(&[(0.0, 5)]), None);
    }
}
