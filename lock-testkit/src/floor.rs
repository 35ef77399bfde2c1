//! The hand-off floor of a contention benchmark: the least work the server
//! must do for one hand-off, timed with the server's plain client in the
//! same run as the locks, so that both see the same machine load.
//!
//! A backend names the server operations one hand-off cannot avoid (etcd: a
//! delete Txn and a linearizable read), the bench times each of them between
//! its rounds, and the floor is `1 / (sum of their p50 latencies)`
//! hand-offs per second. A lock's hand-offs per second divided by it, its
//! share of the floor, says how close the lock comes to that least work,
//! whatever the server's own lock API manages.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How long one timed server call may take before the measurement fails.
pub const CALL_LIMIT: Duration = Duration::from_secs(10);

/// Why a floor measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// A timed call failed.
    #[error("{step}: {message}")]
    Call {
        /// The operation that failed.
        step: &'static str,
        /// What the client said.
        message: String,
    },
    /// A timed call took longer than its limit ([`CALL_LIMIT`]).
    #[error("{step}: no answer within {limit:?}")]
    Timeout {
        /// The operation that took too long.
        step: &'static str,
        /// How long it was given.
        limit: Duration,
    },
}

/// Runs `call` within [`CALL_LIMIT`], naming `step` in its error.
///
/// # Cancel safety
///
/// As `call` is: dropping this drops `call`.
pub async fn within<T, E: fmt::Display>(
    step: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, FloorError> {
    bounded(CALL_LIMIT, step, call).await
}

/// [`within`], with the limit given.
async fn bounded<T, E: fmt::Display>(
    limit: Duration,
    step: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, FloorError> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(FloorError::Call {
            step,
            message: e.to_string(),
        }),
        Err(_) => Err(FloorError::Timeout { step, limit }),
    }
}

/// The timed samples of the operations of one hand-off, gathered over the
/// rounds of a bench.
#[derive(Debug, Default, Clone)]
pub struct Floor {
    /// Each operation's name and latencies, in the order first timed.
    steps: Vec<(&'static str, Vec<Duration>)>,
}

impl Floor {
    /// A floor with no samples yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Times `n` calls of `call`, one after another, as samples of `step`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: samples of calls that finished are kept; the call in
    /// flight is dropped, as `call`'s future allows.
    pub async fn time<E: fmt::Display>(
        &mut self,
        step: &'static str,
        n: usize,
        mut call: impl AsyncFnMut() -> Result<(), E>,
    ) -> Result<(), FloorError> {
        for _ in 0..n {
            let start = Instant::now();
            within(step, call()).await?;
            self.record(step, start.elapsed());
        }
        Ok(())
    }

    /// Adds one latency of `step`, for an operation timed by the caller
    /// (one that needs untimed setup around it).
    pub fn record(&mut self, step: &'static str, took: Duration) {
        match self.steps.iter_mut().find(|(name, _)| *name == step) {
            Some((_, samples)) => samples.push(took),
            None => self.steps.push((step, vec![took])),
        }
    }

    /// The median latency of `step`, if it was timed.
    pub fn p50(&self, step: &str) -> Option<Duration> {
        let (_, samples) = self.steps.iter().find(|(name, _)| *name == step)?;
        Some(median(samples))
    }

    /// The sum of the operations' median latencies: the least time one
    /// hand-off takes.
    pub fn time_per_handoff(&self) -> Duration {
        self.steps.iter().map(|(_, samples)| median(samples)).sum()
    }

    /// Hand-offs per second at the floor, `1 / time_per_handoff`; zero
    /// before any sample.
    pub fn per_second(&self) -> f64 {
        let secs = self.time_per_handoff().as_secs_f64();
        if secs > 0.0 { 1.0 / secs } else { 0.0 }
    }

    /// The share of the floor that `handoffs_per_second` reaches.
    pub fn share(&self, handoffs_per_second: f64) -> f64 {
        let floor = self.per_second();
        if floor > 0.0 {
            handoffs_per_second / floor
        } else {
            0.0
        }
    }
}

/// The header of the table [`Floor::row`] writes rows of (markdown).
pub const TABLE_HEADER: &str =
    "| lock | clients | hand-offs/s | floor, hand-offs/s | of floor |\n|---|---|---|---|---|";

impl Floor {
    /// One row of [`TABLE_HEADER`]'s table: `lock`'s hand-offs per second
    /// against this floor. With one client nothing is handed off, and the
    /// row says so with dashes.
    pub fn row(&self, lock: &str, clients: usize, handoffs_per_second: f64) -> String {
        if clients < 2 {
            return format!("| {lock} | {clients} | – | {:.0} | – |", self.per_second());
        }
        format!(
            "| {lock} | {clients} | {handoffs_per_second:.0} | {:.0} | {:.2} |",
            self.per_second(),
            self.share(handoffs_per_second)
        )
    }
}

/// Prints a bench's floor section: `heading`, the table of `rows` (from
/// [`Floor::row`]), and `floors`, each floor's terms (its [`Display`]).
///
/// [`Display`]: fmt::Display
pub fn print_section(heading: &str, rows: &[String], floors: &[String]) {
    println!("\n## {heading}\n\n{TABLE_HEADER}");
    for row in rows {
        println!("{row}");
    }
    println!();
    for line in floors {
        println!("- {line}");
    }
}

impl fmt::Display for Floor {
    /// "1 / (delete Txn 0.52 ms + linearizable range 0.31 ms) = 1205
    /// hand-offs/s (400 samples each)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self
            .steps
            .iter()
            .map(|(name, samples)| format!("{name} {:.3} ms", median(samples).as_secs_f64() * 1e3))
            .collect();
        let least = self.steps.iter().map(|(_, s)| s.len()).min().unwrap_or(0);
        write!(
            f,
            "1 / ({}) = {:.0} hand-offs/s ({least} or more samples each)",
            terms.join(" + "),
            self.per_second()
        )
    }
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_floor_is_one_over_the_sum_of_the_medians() {
        let mut floor = Floor::new();
        for took in [ms(1), ms(9), ms(2)] {
            floor.record("write", took);
        }
        for took in [ms(3), ms(3), ms(50)] {
            floor.record("read", took);
        }
        assert_eq!(floor.p50("write"), Some(ms(2)));
        assert_eq!(floor.time_per_handoff(), ms(5));
        assert!((floor.per_second() - 200.0).abs() < 1e-9);
        assert!((floor.share(50.0) - 0.25).abs() < 1e-9);
        assert_eq!(
            floor.to_string(),
            "1 / (write 2.000 ms + read 3.000 ms) = 200 hand-offs/s (3 or more samples each)"
        );
    }

    #[test]
    fn a_row_shows_the_share_and_no_share_for_one_client() {
        let mut floor = Floor::new();
        floor.record("commit", ms(2));
        assert_eq!(
            floor.row("ours", 8, 250.0),
            "| ours | 8 | 250 | 500 | 0.50 |"
        );
        assert_eq!(floor.row("ours", 1, 900.0), "| ours | 1 | – | 500 | – |");
    }

    #[test]
    fn a_floor_without_samples_is_zero_not_infinite() {
        let floor = Floor::new();
        assert_eq!(floor.per_second(), 0.0);
        assert_eq!(floor.share(100.0), 0.0);
        assert_eq!(floor.p50("write"), None);
    }

    #[tokio::test]
    async fn timed_calls_are_samples_and_a_failing_call_names_its_step() {
        let mut floor = Floor::new();
        let mut calls = 0;
        floor
            .time("noop", 5, async || {
                calls += 1;
                Ok::<(), String>(())
            })
            .await
            .unwrap();
        assert_eq!(calls, 5);
        assert!(floor.p50("noop").is_some());
        let failed = floor
            .time("broken", 3, async || Err::<(), _>("refused"))
            .await
            .unwrap_err();
        assert_eq!(failed.to_string(), "broken: refused");
    }

    #[tokio::test]
    async fn a_call_that_never_answers_times_out() {
        let hung = std::future::pending::<Result<(), String>>();
        let failed = bounded(ms(10), "hung", hung).await.unwrap_err();
        assert!(matches!(failed, FloorError::Timeout { step: "hung", .. }));
    }
}
