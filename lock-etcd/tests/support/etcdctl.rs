//! The real `etcdctl` (v3 API) against a test cluster: one-shot commands
//! and long-running ones read line by line, every child bounded in time.

use std::path::PathBuf;
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use distlock_testkit::servers::EtcdCluster;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::timeout;

/// The longest any etcdctl child may take to print, or to exit when told.
pub const BOUND: Duration = Duration::from_secs(10);

/// How to run etcdctl against one member.
#[derive(Debug, Clone)]
pub struct Etcdctl {
    binary: PathBuf,
    endpoint: String,
}

impl Etcdctl {
    /// etcdctl on `PATH`, talking to member 0 of `cluster`. Fails the test
    /// naming the package when etcdctl is not installed.
    pub fn for_cluster(cluster: &EtcdCluster) -> Self {
        let binary = distlock_testkit::servers::etcdctl_path().unwrap_or_else(|e| panic!("{e}"));
        Etcdctl {
            binary,
            endpoint: cluster.endpoints()[0].clone(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `etcdctl <args>` to completion within [`BOUND`].
    pub async fn output(&self, args: &[&str]) -> Output {
        let child = self.command(args).spawn().expect("spawn etcdctl");
        match timeout(BOUND, child.wait_with_output()).await {
            Ok(output) => output.expect("wait for etcdctl"),
            Err(_) => panic!("etcdctl {args:?} did not finish within {BOUND:?}"),
        }
    }

    /// Starts `etcdctl <args>`, to be read line by line.
    pub fn spawn(&self, args: &[&str]) -> Running {
        let mut child = self.command(args).spawn().expect("spawn etcdctl");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        Running {
            what: format!("etcdctl {}", args.join(" ")),
            child,
            lines: BufReader::new(stdout).lines(),
            stderr: Some(stderr),
        }
    }
}

/// A running etcdctl. Dropping it kills the process.
pub struct Running {
    what: String,
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Option<ChildStderr>,
}

impl Running {
    /// The next line on stdout, within [`BOUND`].
    pub async fn line(&mut self) -> String {
        match timeout(BOUND, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let err = self.stderr_text().await;
                panic!("{} ended its output early; stderr: {err}", self.what)
            }
            Ok(Err(e)) => panic!("reading the output of {}: {e}", self.what),
            Err(_) => panic!("{} printed nothing within {BOUND:?}", self.what),
        }
    }

    /// Fails if a line arrives within `quiet`.
    pub async fn prints_nothing_for(&mut self, quiet: Duration) {
        if let Ok(line) = timeout(quiet, self.lines.next_line()).await {
            panic!("{} printed {line:?} within {quiet:?}", self.what);
        }
    }

    /// Sends `sig` (a `kill` signal name) to the process with this pid.
    pub async fn signal_pid(pid: u32, sig: &str) {
        let status = timeout(
            BOUND,
            Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status(),
        )
        .await
        .expect("kill finishes")
        .expect("run kill");
        assert!(status.success(), "kill -{sig} {pid}: {status}");
    }

    /// Asks etcdctl to stop as a user's Ctrl-C would (it unlocks or
    /// resigns first) and waits for it to exit, within [`BOUND`].
    pub async fn interrupt(mut self) -> ExitStatus {
        let pid = self.child.id().expect("etcdctl is running");
        Self::signal_pid(pid, "INT").await;
        self.exit().await
    }

    /// Waits for etcdctl to exit on its own, within [`BOUND`].
    pub async fn exit(&mut self) -> ExitStatus {
        match timeout(BOUND, self.child.wait()).await {
            Ok(status) => status.expect("wait for etcdctl"),
            Err(_) => panic!("{} did not exit within {BOUND:?}", self.what),
        }
    }

    async fn stderr_text(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut stderr) = self.stderr.take() {
            let _ = timeout(BOUND, stderr.read_to_string(&mut text)).await;
        }
        text
    }
}
