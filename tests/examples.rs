//! `examples/metrics.rs` serves Prometheus text from a real exporter while
//! workers contend; scraping it finds the documented names with sensible
//! values.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The example binary, built by `cargo test` beside this test's binary.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join("examples").join("metrics");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --example metrics` (cargo test builds it)",
        binary.display()
    );
    binary
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
    let mut child = Command::new(example_binary())
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
