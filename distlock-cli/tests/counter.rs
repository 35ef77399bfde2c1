//! Mutual exclusion across separate OS processes, on every compiled-in
//! backend: 8 concurrent workers each run `distlock run` 25 times; every run
//! does a non-atomic read-sleep-write of a counter file and appends its
//! fencing token to a log. The counter must end at exactly 200 and the
//! tokens, in log order, must strictly increase.

mod support;

use std::time::Duration;

use support::{Fixture, distlock, stderr};

const WORKERS: usize = 8;
const RUNS_PER_WORKER: usize = 25;

/// Read the counter, pause so a concurrent writer would interleave, write it
/// back incremented, and log the token: all under the lock.
const CRITICAL_SECTION: &str = r#"n=$(cat "$COUNTER"); sleep 0.005; echo $((n + 1)) > "$COUNTER"; echo "$DISTLOCK_TOKEN" >> "$TOKENS""#;

async fn counter_is_exact_and_tokens_increase(fixture: Fixture) {
    let work = tempfile::tempdir().unwrap();
    let counter = work.path().join("counter");
    let tokens = work.path().join("tokens");
    std::fs::write(&counter, "0\n").unwrap();
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (url, counter, tokens) = (fixture.url.clone(), counter.clone(), tokens.clone());
        workers.push(tokio::spawn(async move {
            for run in 0..RUNS_PER_WORKER {
                let mut cmd = distlock(Some(&url));
                cmd.args([
                    "run",
                    "--wait",
                    "60s",
                    "--ttl",
                    "10s",
                    "cli/counter",
                    "--",
                    "sh",
                    "-c",
                    CRITICAL_SECTION,
                ])
                .env("COUNTER", &counter)
                .env("TOKENS", &tokens);
                let output = support::output_within(Duration::from_secs(90), &mut cmd).await;
                assert!(
                    output.status.success(),
                    "worker {worker} run {run}: {:?}: {}",
                    output.status,
                    stderr(&output)
                );
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker panicked");
    }
    let total: usize = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        total,
        WORKERS * RUNS_PER_WORKER,
        "lost updates: the lock let two processes in"
    );
    let tokens: Vec<u64> = std::fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .map(|l| l.parse().expect("a token per line"))
        .collect();
    assert_eq!(tokens.len(), WORKERS * RUNS_PER_WORKER);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing in critical-section order: {tokens:?}"
    );
}

support::test_on_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    counter_is_exact_and_tokens_increase: file, etcd, redis, zk, postgres, mysql
}
