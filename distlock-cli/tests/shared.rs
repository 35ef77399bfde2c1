//! `distlock run --permits N`, `--shared` and `--exclusive` across separate
//! `distlock` processes: a semaphore's limit is never exceeded and is
//! reached, readers overlap, a writer waits for the readers ahead of it,
//! and bad flag combinations are one-line usage errors.
//!
//! Every proof is by what the commands leave in files (markers they count,
//! a log they append to), never by how long something took.

mod support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use support::{
    BOUND, Fixture, NOT_ACQUIRED, cli, cmd, output_within, spawn_piped, stderr, usage_error,
    wait_for_file,
};

/// The semaphore's permits, and one more child than that.
const PERMITS: usize = 2;
const CHILDREN: usize = PERMITS + 1;

/// Waits (up to 10 s) for the file `$1`; fails the command with exit 3 if
/// it never appears.
const AWAIT: &str = r#"await() { i=0; while [ ! -e "$1" ]; do i=$((i + 1)); [ $i -gt 1000 ] && exit 3; sleep 0.01; done; }"#;

/// Under a permit: leave a marker in `$WORK/inside`, count the markers and
/// log the count with the token, and stay until some holder has counted
/// `$PERMITS` (so the semaphore is seen full, not by luck of timing).
fn permit_holder() -> String {
    format!(
        r#"{AWAIT}
mkdir -p "$WORK/inside"; touch "$WORK/inside/$$"
n=$(ls "$WORK/inside" | wc -l); echo "$n $DISTLOCK_TOKEN" >> "$WORK/counts"
[ "$n" -ge "$PERMITS" ] && touch "$WORK/full"
await "$WORK/full"
rm "$WORK/inside/$$""#
    )
}

/// `distlock run ARGS -- sh -c SCRIPT` on `url` with `$WORK` set to `work`,
/// run to completion.
async fn run_script(url: &str, args: &str, work: &Path, script: &str) -> Output {
    let mut cmd = cmd(Some(url), &format!("run --wait 60s {args} -- sh -c"));
    cmd.arg(script)
        .env("WORK", work)
        .env("PERMITS", PERMITS.to_string());
    output_within(BOUND * 2, &mut cmd).await
}

/// Awaits a run started with [`run_script`] in a task and checks that its
/// command succeeded; `what` says what a failure means.
async fn succeeded(run: tokio::task::JoinHandle<Output>, what: &str) {
    let output = run.await.unwrap();
    assert!(
        output.status.success(),
        "{what}: {:?}: {}",
        output.status,
        stderr(&output)
    );
}

/// Three `distlock run --permits 2` at once: every count a holder made is
/// at most 2, one is 2, and every grant had a token of its own. On a
/// backend without semaphores, `run --permits` is its one-line
/// `Unsupported` error, exit 64.
async fn permits_are_never_exceeded_across_processes(fixture: Fixture) {
    let backend = distlock::connect(&fixture.url).await.expect("connect");
    let caps = backend.capabilities();
    if !caps.semaphore {
        eprintln!(
            "the {} backend has no semaphores; `run --permits` does not apply, only its refusal",
            caps.backend
        );
        let refused = cli(Some(&fixture.url), "run --permits 2 cli/permits -- true").await;
        let line = usage_error(&refused, &caps.backend);
        assert!(line.contains("semaphore"), "{line}");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let script = permit_holder();
    let runs: Vec<_> = (0..CHILDREN)
        .map(|_| {
            let (url, work, script) = (fixture.url.clone(), work.path().to_owned(), script.clone());
            tokio::spawn(async move {
                run_script(
                    &url,
                    &format!("--permits {PERMITS} cli/permits"),
                    &work,
                    &script,
                )
                .await
            })
        })
        .collect();
    for run in runs {
        succeeded(run, "a permit holder").await;
    }
    let log = std::fs::read_to_string(work.path().join("counts")).unwrap();
    let entries: Vec<(usize, u64)> = log
        .lines()
        .map(|line| {
            let (count, token) = line.trim().split_once(' ').expect("count and token");
            (count.trim().parse().unwrap(), token.parse().unwrap())
        })
        .collect();
    assert_eq!(entries.len(), CHILDREN, "{log}");
    let most = entries.iter().map(|e| e.0).max();
    assert_eq!(
        most,
        Some(PERMITS),
        "never more than {PERMITS}, and full once: {log}"
    );
    let mut tokens: Vec<u64> = entries.iter().map(|e| e.1).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), CHILDREN, "two grants shared a token: {log}");
}

support::test_on_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    permits_are_never_exceeded_across_processes: file, etcd, redis, redlock, zk, postgres, mysql
}

/// Two `distlock run --shared` hold the read side at once: each waits for
/// the other's marker, which it could not see if they took turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_runs_overlap() {
    let fixture = support::file_fixture();
    let work = tempfile::tempdir().unwrap();
    let reader = |me: &'static str, other: &'static str| {
        let (url, work) = (fixture.url.clone(), work.path().to_owned());
        let script = format!(r#"{AWAIT}; touch "$WORK/{me}"; await "$WORK/{other}""#);
        tokio::spawn(async move { run_script(&url, "--shared cli/doc", &work, &script).await })
    };
    let (a, b) = (reader("a", "b"), reader("b", "a"));
    for run in [a, b] {
        succeeded(run, "a reader did not see the other inside").await;
    }
}

/// `distlock run --exclusive` waits for the reader ahead of it: once it is
/// queued a new reader is refused (writers go first), and it runs only
/// after the reader's command has finished, as the shared log shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_run_waits_for_the_readers() {
    let fixture = support::file_fixture();
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("log");
    let reader_script =
        format!(r#"{AWAIT}; touch "$WORK/started"; await "$WORK/go"; echo reader >> "$WORK/log""#);
    let reader = {
        let (url, work) = (fixture.url.clone(), work.path().to_owned());
        tokio::spawn(
            async move { run_script(&url, "--shared cli/rw", &work, &reader_script).await },
        )
    };
    wait_for_file(&work.path().join("started"), BOUND).await;
    let mut writer_cmd = cmd(
        Some(&fixture.url),
        "run --wait 60s --exclusive cli/rw -- sh -c",
    );
    writer_cmd
        .arg(r#"echo writer >> "$WORK/log""#)
        .env("WORK", work.path());
    let writer = spawn_piped(&mut writer_cmd);
    // The writer is queued once a new reader is refused.
    let start = tokio::time::Instant::now();
    loop {
        let late = cli(Some(&fixture.url), "run --wait 0 --shared cli/rw -- true").await;
        if late.status.code() == Some(NOT_ACQUIRED) {
            break;
        }
        assert!(late.status.success(), "a late reader: {}", stderr(&late));
        assert!(start.elapsed() < BOUND, "the writer never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!log.exists(), "the writer ran beside the reader");
    std::fs::write(work.path().join("go"), b"").unwrap();
    succeeded(reader, "the reader").await;
    let written = tokio::time::timeout(BOUND, writer.wait_with_output())
        .await
        .expect("the writer finishes")
        .unwrap();
    assert!(written.status.success(), "{}", stderr(&written));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "reader\nwriter\n");
}

/// `--permits 0`, `--permits` with `--shared` or `--exclusive`, and
/// `--shared` with `--exclusive` are usage errors: exit 64, one line.
#[tokio::test]
async fn conflicting_or_empty_shared_flags_are_usage_errors() {
    let fixture = support::file_fixture();
    for (args, says) in [
        ("--permits 0", "at least 1 permit"),
        ("--permits 2 --shared", "--shared"),
        ("--permits 2 --exclusive", "--exclusive"),
        ("--shared --exclusive", "--exclusive"),
    ] {
        let output = cli(Some(&fixture.url), &format!("run {args} cli/bad -- true")).await;
        let line = usage_error(&output, &args);
        assert!(line.contains(says), "{args}: {line}");
    }
}
