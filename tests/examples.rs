//! The examples run. Those that need no server exit 0 on the memory and
//! file backends; `shutdown` releases every lock on Ctrl-C before it exits;
//! `metrics` serves Prometheus text from a real exporter while workers
//! contend, and scraping it finds the documented names with sensible
//! values. Every example file is declared in its crate's Cargo.toml and
//! listed in examples/README.md.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock::LockBackendExt;
use support::{example_binary, example_command, run_to_success};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

/// One example run, with room for a loaded machine.
const BOUND: Duration = Duration::from_secs(60);

/// The example `name`, started with only `DISTLOCK_URL` (if any) in its
/// environment, its output piped.
fn example_with_url(name: &str, url: Option<&str>) -> tokio::process::Command {
    match url {
        Some(url) => example_command(name, &[("DISTLOCK_URL", url)]),
        None => example_command(name, &[]),
    }
}

/// The URLs the examples that need no server run on: the default
/// (memory), and a file backend in a fresh directory.
fn serverless_urls(dir: &Path) -> [Option<String>; 2] {
    [None, Some(format!("file://{}", dir.display()))]
}

#[tokio::test]
async fn the_examples_without_a_server_run_on_memory_and_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Each example, and a line it prints last when all went well.
    let examples = [
        ("quickstart", "done: every holder got a larger token"),
        ("any_backend", "released"),
        ("election", "done: three terms, tokens in order"),
        ("shared_primitives", "permit "),
    ];
    for url in serverless_urls(dir.path()) {
        for (name, last) in examples {
            let on = url.as_deref().unwrap_or("the default URL");
            let stdout =
                run_to_success(name, on, example_with_url(name, url.as_deref()), BOUND).await;
            assert!(
                stdout.lines().last().is_some_and(|l| l.contains(last)),
                "{name} on {on}: the last line is not {last:?}\n{stdout}"
            );
        }
    }
}

#[tokio::test]
async fn the_shutdown_example_releases_its_locks_on_ctrl_c() {
    let dir = tempfile::tempdir().expect("temp dir");
    for url in serverless_urls(dir.path()) {
        let on = url.as_deref().unwrap_or("the default URL");
        let mut child = example_with_url("shutdown", url.as_deref())
            .spawn()
            .expect("start the example");
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        tokio::time::timeout(BOUND, stdout.read_line(&mut first))
            .await
            .unwrap_or_else(|_| panic!("shutdown on {on}: not serving within {BOUND:?}"))
            .expect("read the example's output");
        assert!(first.starts_with("serving"), "shutdown on {on}: {first}");
        // Let the workers take, hold and wait for the job lock.
        tokio::time::sleep(Duration::from_millis(300)).await;

        // What Ctrl-C in a terminal sends.
        let pid = child.id().expect("the example runs");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("send SIGINT");
        let mut rest = String::new();
        tokio::time::timeout(BOUND, stdout.read_to_string(&mut rest))
            .await
            .unwrap_or_else(|_| panic!("shutdown on {on}: did not stop within {BOUND:?}"))
            .expect("read the example's output");
        let status = tokio::time::timeout(BOUND, child.wait())
            .await
            .expect("the example exits")
            .expect("the example's status");
        assert!(
            status.success(),
            "shutdown on {on}: {status}\n{first}{rest}"
        );
        for line in [
            "shutting down",
            "released the primary lock",
            "background releases finished: true",
        ] {
            assert!(rest.contains(line), "shutdown on {on}: no {line:?}\n{rest}");
        }

        // The file backend outlives the process: a lock left behind would
        // stay taken until its TTL (10 s by default).
        if let Some(url) = &url {
            let backend = distlock::connect(url).await.expect("connect");
            for name in ["examples/service/primary", "examples/service/jobs"] {
                let guard = backend
                    .try_lock(name)
                    .await
                    .unwrap_or_else(|e| panic!("shutdown on {on}: {name} was left held: {e}"));
                guard.release().await.expect("release");
            }
        }
    }
}

/// The `[[example]]` names a manifest declares.
fn declared_examples(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).expect("read the manifest");
    let table: toml::Table = text.parse().expect("parse the manifest");
    table
        .get("example")
        .and_then(toml::Value::as_array)
        .map(|examples| {
            examples
                .iter()
                .filter_map(|e| e.get("name")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_example_is_declared_and_indexed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let index =
        std::fs::read_to_string(root.join("examples/README.md")).expect("examples/README.md");
    let mut problems = Vec::new();
    let mut crates = vec![root.clone()];
    for entry in std::fs::read_dir(&root).expect("read the workspace") {
        let dir = entry.expect("directory entry").path();
        if dir.join("Cargo.toml").is_file() && dir.join("examples").is_dir() {
            crates.push(dir);
        }
    }
    for dir in crates {
        let declared = declared_examples(&dir.join("Cargo.toml"));
        let Ok(files) = std::fs::read_dir(dir.join("examples")) else {
            continue;
        };
        for file in files {
            let path = file.expect("directory entry").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let shown = path.strip_prefix(&root).unwrap().display().to_string();
            if !declared.contains(&stem) {
                problems.push(format!("{shown}: no [[example]] name = \"{stem}\""));
            }
            // Links in examples/README.md are relative to examples/.
            let link = match shown.strip_prefix("examples/") {
                Some(own) => format!("]({own})"),
                None => format!("](../{shown})"),
            };
            if !index.contains(&link) {
                problems.push(format!(
                    "{shown}: not linked from examples/README.md as `{link}`"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

struct Example(Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scrape(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the example");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the sample `series` (name and labels as exported).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn the_metrics_example_exports_the_documented_names() {
    let mut child = Command::new(example_binary("metrics"))
        .arg("127.0.0.1:0")
        .env("DISTLOCK_URL", "memory://")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the example");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .expect("the example prints its address");
    let _example = Example(child);
    let addr = first
        .trim()
        .strip_prefix("serving http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();

    let acquired = "distlock_acquisitions_total{backend=\"memory\",result=\"acquired\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = scrape(&addr);
        if sample(&text, acquired).is_some_and(|n| n >= 20.0) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no acquisitions counted:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for name in [
        "distlock_acquire_wait_seconds",
        "distlock_hold_seconds",
        "distlock_held",
        "distlock_waiting",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let held = sample(&text, "distlock_held{backend=\"memory\"}").expect("held gauge");
    assert!(
        (0.0..=1.0).contains(&held),
        "one lock, so at most one held: {held}"
    );
    let waiting = sample(&text, "distlock_waiting{backend=\"memory\"}").expect("waiting gauge");
    assert!(
        (0.0..=4.0).contains(&waiting),
        "four workers: {waiting} waiting"
    );
    assert!(
        !text.contains("distlock_losses_total"),
        "nothing was lost, so no loss is counted:\n{text}"
    );
}
