//! Each point of the held-locks sweep in a child process of its own: the
//! memory a point measures is resident growth, and an allocator keeps what
//! an earlier point (or backend) freed and hands it out again, so in one
//! process later points would look cheaper than they are.
//!
//! The child is this program, `distlock bench --sweep held --in-process`,
//! with the same settings and one point; it writes its measurement as JSON
//! to a temporary file. The URL goes in `DISTLOCK_URL`, not on the command
//! line, where other users could read a password in it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use distlock::Config;
use tokio::process::Command;

use super::held::HeldReport;
use crate::cli::BenchArgs;

/// Margin over the acquisition bound and the hold for connecting, releasing
/// and starting up: past it the child is killed and the point fails.
const CHILD_MARGIN: Duration = Duration::from_secs(180);

/// Runs point `at` on `config`'s backend in a child process.
pub(super) async fn held_point(
    args: &BenchArgs,
    config_file: Option<&PathBuf>,
    config: &Config,
    at: usize,
) -> Result<HeldReport, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let dir = tempfile_dir()?;
    let json = dir.join("point.json");
    let mut command = Command::new(exe);
    command
        .env("DISTLOCK_URL", config.effective_url())
        .args(["bench", "--sweep", "held", "--in-process"])
        .arg(format!("--points={at}"))
        .arg(format!("--duration={}ms", args.duration.as_millis()))
        .arg(format!("--concurrency={}", args.concurrency))
        .arg(format!("--prefix={}", args.prefix))
        .arg(format!(
            "--acquire-within={}ms",
            args.acquire_within.as_millis()
        ))
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(ttl) = args.ttl {
        command.arg(format!("--ttl={}ms", ttl.as_millis()));
    }
    if let Some(file) = config_file {
        command.arg("--config").arg(file);
    }
    if let Some(timeout) = config.settings().connect_timeout {
        command.arg(format!("--connect-timeout={}ms", timeout.as_millis()));
    }
    let bound = args.acquire_within + args.duration + CHILD_MARGIN;
    let outcome = tokio::time::timeout(bound, command.status()).await;
    let read = std::fs::read_to_string(&json);
    let _ = std::fs::remove_dir_all(&dir);
    match outcome {
        Err(_) => {
            return Err(format!(
                "the point's process did not finish within {bound:?}"
            ));
        }
        Ok(Err(e)) => return Err(format!("cannot start the point's process: {e}")),
        Ok(Ok(_)) => {}
    }
    let json = read.map_err(|e| format!("the point's process wrote no results: {e}"))?;
    point_of(&json)
}

/// The one point of a child's `--json`: its measurement or its error.
fn point_of(json: &str) -> Result<HeldReport, String> {
    let output: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("the point's results: {e}"))?;
    let point = &output["backends"][0]["points"][0];
    if let Some(error) = point["error"].as_str() {
        return Err(error.to_owned());
    }
    serde_json::from_value(point["held"].clone()).map_err(|e| format!("the point's results: {e}"))
}

/// A fresh private directory for the child's results.
fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "distlock-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
