//! Bounded readiness waits with log tails on failure.

use std::future::Future;
use std::time::{Duration, Instant};

use super::LaunchError;
use super::process::ChildProcess;

/// How long one probe may take before it counts as a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between probes.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Polls `probe` until it succeeds, the process exits, or `timeout` passes.
///
/// `probe` returns `Err(description)` while the server is not ready; the last
/// description ends up in the [`LaunchError::NotReady`] message next to the
/// tail of the process log.
pub(crate) async fn wait_ready<F, Fut>(
    process: &ChildProcess,
    timeout: Duration,
    mut probe: F,
) -> Result<(), LaunchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    loop {
        if let Some(status) = process.exit_status() {
            return Err(LaunchError::Exited {
                what: process.label().to_owned(),
                status: status.to_string(),
                log: process.log_path().to_owned(),
                tail: process.log_tail(),
            });
        }
        let last_probe = match tokio::time::timeout(PROBE_TIMEOUT, probe()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(seen)) => seen,
            Err(_) => format!("probe timed out after {PROBE_TIMEOUT:?}"),
        };
        if started.elapsed() >= timeout {
            return Err(LaunchError::NotReady {
                what: process.label().to_owned(),
                waited: started.elapsed(),
                last_probe,
                log: process.log_path().to_owned(),
                tail: process.log_tail(),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
