//! Running the examples from tests: their binaries, built by `cargo test`
//! beside the test binary, started with a clean environment.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// The example binary `name`, built by `cargo test` beside this test's binary.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --features full --example {name}` \
         (cargo test builds it)",
        binary.display()
    );
    binary
}

/// The example `name`, started with only `env` in its environment, its
/// output piped, killed if the test drops it.
pub(crate) fn example_command(name: &str, env: &[(&str, &str)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(example_binary(name));
    command
        .env_clear()
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs example `name` (described as running `on` something) to its end
/// within `bound`, asserts it exited 0, and returns its standard output.
pub(crate) async fn run_to_success(
    name: &str,
    on: &str,
    mut command: tokio::process::Command,
    bound: Duration,
) -> String {
    let child = command.spawn().expect("start the example");
    let output = tokio::time::timeout(bound, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{name} on {on}: did not finish within {bound:?}"))
        .expect("the example's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{name} on {on}: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
