//! `distlock run` on etcd with `layout=concurrency` and the real
//! `etcdctl lock` exclude each other: one lock, two tools.

mod support;

use std::process::Stdio;
use std::time::Duration;

use support::{NOT_ACQUIRED, cmd, etcd_fixture, output_within, stderr};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(15);
/// How long a tool that must stay out is watched for not getting in.
const QUIET: Duration = Duration::from_millis(500);
/// Says `held <its pid>`, then waits until sent SIGTERM; gives up (exit 3)
/// after about 20 s, so a failed test leaves no shell behind.
const HOLD: &str = r#"echo "held $$"; trap 'exit 0' TERM; i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 3"#;

/// A child whose stdout is read line by line; killed when dropped.
struct Running {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Running {
    fn spawn(mut cmd: Command) -> Self {
        cmd.stdout(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Running { child, lines }
    }

    async fn line(&mut self) -> String {
        match timeout(BOUND, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            other => panic!("no line within {BOUND:?}: {other:?}"),
        }
    }

    /// The pid in a `held <pid>` line.
    async fn held_by(&mut self) -> i32 {
        let line = self.line().await;
        line.strip_prefix("held ")
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("unexpected output {line:?}"))
    }

    async fn exit_code(&mut self) -> Option<i32> {
        timeout(BOUND, self.child.wait())
            .await
            .expect("exits in time")
            .expect("wait")
            .code()
    }
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("signal");
}

/// `etcdctl` (v3 API) for the fixture's member; missing, it fails the
/// test naming its package.
fn etcdctl(url: &str, args: &[&str]) -> Command {
    let binary = distlock_testkit::servers::etcdctl_path().unwrap_or_else(|e| panic!("{e}"));
    let endpoint = url.strip_prefix("etcd://").expect("an etcd URL");
    let mut cmd = Command::new(binary);
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Polls until `etcdctl get --prefix <prefix>` lists `count` keys.
async fn until_queued(url: &str, prefix: &str, count: usize) {
    let start = tokio::time::Instant::now();
    loop {
        let mut cmd = etcdctl(url, &["get", "--prefix", "--keys-only", prefix]);
        let output = output_within(BOUND, &mut cmd).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let listed = String::from_utf8_lossy(&output.stdout).into_owned();
        if listed.lines().filter(|l| !l.is_empty()).count() == count {
            return;
        }
        assert!(start.elapsed() < BOUND, "{prefix} holds {listed:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `waiter` queues behind `holder`, whose command is the shell `shell`, and
/// prints nothing while it holds lock `name`; once the shell ends, `holder`
/// exits 0 and `waiter` gets in and prints its key under `name/`.
async fn hands_over(url: &str, name: &str, holder: &mut Running, shell: i32, waiter: &mut Running) {
    let prefix = format!("{name}/");
    until_queued(url, &prefix, 2).await;
    if let Ok(line) = timeout(QUIET, waiter.lines.next_line()).await {
        panic!("the waiter got in while the holder holds {name}: {line:?}");
    }
    signal(shell, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(holder.exit_code().await, Some(0));
    let key = waiter.line().await;
    assert!(key.starts_with(&prefix), "{key}");
}

#[tokio::test]
async fn distlock_run_keeps_etcdctl_lock_out_until_its_command_ends() {
    let fixture = etcd_fixture().await;
    let url = format!("{}?layout=concurrency", fixture.url);
    let mut run = cmd(Some(&url), "run cli/interop -- sh -c");
    run.arg(HOLD);
    let mut run = Running::spawn(run);
    let shell = run.held_by().await;

    let mut peer = Running::spawn(etcdctl(&fixture.url, &["lock", "cli/interop"]));
    hands_over(&fixture.url, "cli/interop", &mut run, shell, &mut peer).await;
    signal(
        peer.child.id().unwrap() as i32,
        nix::sys::signal::Signal::SIGINT,
    );
    assert_eq!(peer.exit_code().await, Some(0));
}

#[tokio::test]
async fn etcdctl_lock_keeps_distlock_run_out_until_its_command_ends() {
    let fixture = etcd_fixture().await;
    let url = format!("{}?layout=concurrency", fixture.url);
    let mut holder = Running::spawn(etcdctl(
        &fixture.url,
        &["lock", "cli/go-held", "--", "sh", "-c", HOLD],
    ));
    let shell = holder.held_by().await;

    let busy = output_within(
        BOUND,
        &mut cmd(Some(&url), "run --wait 0 cli/go-held -- true"),
    )
    .await;
    assert_eq!(busy.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&busy));
    assert!(stderr(&busy).contains("cli/go-held"), "{}", stderr(&busy));

    let mut waiting = cmd(Some(&url), "run --wait 10s cli/go-held -- sh -c");
    waiting.arg("echo \"$DISTLOCK_KEY\"");
    let mut waiting = Running::spawn(waiting);
    hands_over(
        &fixture.url,
        "cli/go-held",
        &mut holder,
        shell,
        &mut waiting,
    )
    .await;
    assert_eq!(waiting.exit_code().await, Some(0));
}
