//! The progress bar on stderr (hidden when stderr is not a terminal).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use distlock_workload::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A running progress bar; [`finish`](Self::finish) stops it.
pub(super) struct Bar {
    bar: ProgressBar,
    ticker: JoinHandle<()>,
}

pub(super) fn start(backend: &str, duration: Duration, progress: Arc<Progress>) -> Bar {
    let total = u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:30}] {elapsed:>4} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(backend.to_owned());
    let ticker = tokio::spawn({
        let bar = bar.clone();
        async move {
            let start = Instant::now();
            loop {
                let elapsed = start.elapsed();
                let done = progress.acquisitions.load(Ordering::Relaxed);
                bar.set_position(
                    u64::try_from(elapsed.as_millis())
                        .unwrap_or(u64::MAX)
                        .min(total),
                );
                let rate = done as f64 / elapsed.as_secs_f64().max(1e-3);
                bar.set_message(format!("{done} acquisitions ({rate:.0}/s)"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    Bar { bar, ticker }
}

impl Bar {
    pub(super) fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}
