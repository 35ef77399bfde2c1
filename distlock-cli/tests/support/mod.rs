//! Shared by the CLI's integration tests: running the `distlock` binary and
//! starting the backends under test on real servers.
//!
//! A server binary that is missing makes the test fail with a message that
//! names `scripts/install-servers.sh` (from distlock-testkit's launchers); nothing
//! is skipped.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};

/// The `distlock` binary built for these tests.
pub const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

/// How long one `distlock` invocation may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(30);

/// Exit codes documented in `distlock --help`.
pub const FREE: i32 = 1;
pub const USAGE: i32 = 64;
pub const NOT_ACQUIRED: i32 = 75;
pub const LOST: i32 = 76;
pub const NOT_FOUND: i32 = 127;

#[allow(unused_imports)] // Not every test file uses every backend.
pub use distlock_testkit::fixtures::{
    Fixture, etcd as etcd_fixture, file as file_fixture, postgres as postgres_fixture,
    redis as redis_fixture, redlock as redlock_fixture, zk as zk_fixture,
};

/// A MariaDB server with the table layout, through the test user.
pub async fn mysql_fixture() -> Fixture {
    let server = distlock_testkit::servers::MariadbServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start mariadb: {e}"));
    Fixture::new(server.url(), server)
}

/// A `distlock` command with a clean environment (no `DISTLOCK_*` from the
/// developer's shell) and the given URL.
pub fn distlock(url: Option<&str>) -> Command {
    let mut cmd = Command::new(DISTLOCK);
    for var in distlock::env_vars().chain(["DISTLOCK_CONFIG", "DISTLOCK_LOG"]) {
        cmd.env_remove(var);
    }
    if let Some(url) = url {
        cmd.arg("--url").arg(url);
    }
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// `distlock [--url URL] WORDS…`: `words` split at white space; add a
/// script or a path with `.arg`.
pub fn cmd(url: Option<&str>, words: &str) -> Command {
    let mut cmd = distlock(url);
    cmd.args(words.split_whitespace());
    cmd
}

/// Runs `distlock [--url URL] WORDS…` (see [`cmd`]) to completion within
/// [`BOUND`].
pub async fn cli(url: Option<&str>, words: &str) -> Output {
    output_within(BOUND, &mut cmd(url, words)).await
}

/// Runs `cmd` to completion, failing the test if it takes longer than `bound`.
pub async fn output_within(bound: Duration, cmd: &mut Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn distlock");
    match tokio::time::timeout(bound, child.wait_with_output()).await {
        Ok(output) => output.expect("wait for distlock"),
        Err(_) => panic!("distlock did not finish within {bound:?}: {cmd:?}"),
    }
}

/// Spawns `cmd` with its stdout and stderr captured.
pub fn spawn_piped(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn distlock")
}

/// Sends `signal` to `child` and returns its output once it has exited,
/// failing the test if that takes longer than [`BOUND`].
pub async fn signal_and_wait(child: Child, signal: Signal) -> Output {
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, signal).expect("signal");
    match tokio::time::timeout(BOUND, child.wait_with_output()).await {
        Ok(output) => output.expect("wait for distlock"),
        Err(_) => panic!("distlock did not exit within {BOUND:?} of {signal}"),
    }
}

/// Stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Stderr, checked to be the one `distlock: ` line of a clean failure (no
/// panic, no backtrace hint).
pub fn one_line_error(output: &Output) -> String {
    let err = stderr(output);
    assert_eq!(
        err.lines().count(),
        1,
        "expected one line on stderr, got: {err:?}"
    );
    assert!(err.starts_with("distlock: "), "{err:?}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err:?}"
    );
    err
}

/// Checks that `output` is a failure with exit `code` and one clean line,
/// and returns the line; `case` names the input in failure messages.
pub fn failure(output: &Output, code: i32, case: &dyn std::fmt::Debug) -> String {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{case:?}: {}",
        stderr(output)
    );
    one_line_error(output)
}

/// [`failure`] with the usage code, 64.
pub fn usage_error(output: &Output, case: &dyn std::fmt::Debug) -> String {
    failure(output, USAGE, case)
}

/// Stdout, trimmed, as a fencing token.
pub fn token(output: &Output) -> u64 {
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("stdout {text:?} is no token: {e}"))
}

/// Waits until `path` exists, failing after `bound`.
pub async fn wait_for_file(path: &Path, bound: Duration) {
    let start = tokio::time::Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < bound,
            "{} did not appear within {bound:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One scenario on several backends: `CHECK: BACKEND, …` makes a module
/// `CHECK` with one test per backend, named after it (`CHECK::etcd`), that
/// runs `CHECK(fixture)` on a fresh fixture of that backend (`file`,
/// `etcd`, `redis`, `redlock`, `zk`, `postgres`, `mysql`) with the given test
/// attribute, compiled only with that backend's feature.
#[allow(unused_macros)] // Not every test file tests on several backends.
macro_rules! test_on_backends {
    (#[$test:meta] $check:ident: $($backend:ident),+ $(,)?) => {
        mod $check {
            $($crate::support::test_on_backends!(@$backend #[$test] $check);)+
        }
    };
    (@file $($t:tt)+) => { $crate::support::test_on_backends!(@test [] [file_fixture()] file $($t)+); };
    (@etcd $($t:tt)+) => { $crate::support::test_on_backends!(@test [feature = "etcd"] [etcd_fixture().await] etcd $($t)+); };
    (@redis $($t:tt)+) => { $crate::support::test_on_backends!(@test [feature = "redis"] [redis_fixture().await] redis $($t)+); };
    (@redlock $($t:tt)+) => { $crate::support::test_on_backends!(@test [feature = "redis"] [redlock_fixture().await] redlock $($t)+); };
    (@postgres $($t:tt)+) => { $crate::support::test_on_backends!(@test [feature = "postgres"] [postgres_fixture().await] postgres $($t)+); };
    (@mysql $($t:tt)+) => { $crate::support::test_on_backends!(@test [feature = "mysql"] [mysql_fixture().await] mysql $($t)+); };
    (@zk $($t:tt)+) => { $crate::support::test_on_backends!(@test [feature = "zk"] [zk_fixture().await] zk $($t)+); };
    (@test [$($cfg:meta)?] [$($fixture:tt)+] $backend:ident #[$test:meta] $check:ident) => {
        $(#[cfg($cfg)])?
        #[$test]
        async fn $backend() {
            super::$check($crate::support::$($fixture)+).await;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use test_on_backends;
