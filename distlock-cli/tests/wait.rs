//! `distlock run --wait D` that gives up: it exits 75, and it has left the
//! lock's queue before it exits, on every backend, so the next waiter is not
//! held up behind a process that is gone. A wait that ends on a server that
//! went silent exits 69 instead: the lock was not shown to be busy.

mod support;

use std::time::Duration;

use support::{BOUND, Fixture, cmd, output_within, spawn_piped, stderr, wait_for_file};

/// Exit code of `distlock run` when the lock was not acquired within `--wait`.
const NOT_ACQUIRED: i32 = 75;

/// `waiter_url` is how the waiter that gives up reaches the backend: by
/// default as everyone does, or over a slow link, where leaving the queue
/// takes a real round trip as it does across a network.
async fn a_waiter_that_gives_up_leaves_the_queue(fixture: Fixture, waiter_url: Option<&str>) {
    let url = fixture.url.as_str();
    let waiter_url = waiter_url.unwrap_or(url);
    let work = tempfile::tempdir().unwrap();
    let (held, go) = (work.path().join("held"), work.path().join("go"));
    let mut holder = cmd(Some(url), "run --ttl 10s jobs/wait -- sh -c");
    holder.arg(format!(
        r#"touch "{}"; while [ ! -e "{}" ]; do sleep 0.02; done"#,
        held.display(),
        go.display()
    ));
    let holder = spawn_piped(&mut holder);
    wait_for_file(&held, BOUND).await;

    let gave_up = output_within(
        BOUND,
        &mut cmd(
            Some(waiter_url),
            "run --ttl 10s --wait 1s jobs/wait -- true",
        ),
    )
    .await;
    assert_eq!(
        gave_up.status.code(),
        Some(NOT_ACQUIRED),
        "{}",
        stderr(&gave_up)
    );

    // The process is gone: so must be its place in the queue.
    let shown = output_within(BOUND, &mut cmd(Some(url), "status jobs/wait --json")).await;
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let status: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(
        status["waiters"],
        serde_json::json!([]),
        "a waiter that gave up and exited is still queued: {status}"
    );

    // And the next waiter gets the lock as soon as the holder lets go.
    let next = spawn_piped(&mut cmd(Some(url), "run --ttl 10s jobs/wait -- true"));
    std::fs::write(&go, "").unwrap();
    let released = tokio::time::Instant::now();
    let next = tokio::time::timeout(BOUND, next.wait_with_output())
        .await
        .expect("the next waiter finishes")
        .unwrap();
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "the next waiter got the lock {:?} after the release",
        released.elapsed()
    );
    let holder = tokio::time::timeout(BOUND, holder.wait_with_output())
        .await
        .expect("the holder finishes")
        .unwrap();
    assert!(holder.status.success(), "{}", stderr(&holder));
}

#[tokio::test]
async fn file_waiter_that_gives_up_leaves_the_queue() {
    a_waiter_that_gives_up_leaves_the_queue(support::file_fixture(), None).await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_waiter_that_gives_up_leaves_the_queue() {
    a_waiter_that_gives_up_leaves_the_queue(support::etcd_fixture().await, None).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_waiter_that_gives_up_leaves_the_queue() {
    let fixture = support::redis_fixture().await;
    let server = fixture.url.trim_start_matches("redis://").to_owned();
    let slow = distlock_testkit::proxy::FaultProxy::start(server.parse().unwrap())
        .await
        .unwrap();
    slow.delay(Duration::from_millis(100));
    let slow_url = format!("redis://{}", slow.addr());
    a_waiter_that_gives_up_leaves_the_queue(fixture, Some(&slow_url)).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redlock_waiter_that_gives_up_leaves_the_queue() {
    a_waiter_that_gives_up_leaves_the_queue(support::redlock_fixture().await, None).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_waiter_that_gives_up_leaves_the_queue() {
    a_waiter_that_gives_up_leaves_the_queue(support::mysql_fixture().await, None).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_waiter_that_gives_up_leaves_the_queue() {
    a_waiter_that_gives_up_leaves_the_queue(support::postgres_fixture().await, None).await;
}

#[cfg(feature = "zk")]
#[tokio::test]
async fn zookeeper_waiter_that_gives_up_leaves_the_queue() {
    a_waiter_that_gives_up_leaves_the_queue(support::zk_fixture().await, None).await;
}

/// Exit code of `distlock run` when the backend does not answer.
#[cfg(feature = "redis")]
const UNAVAILABLE: i32 = 69;

/// A wait that ends because the server went silent is not a busy lock:
/// `run` asks the server once, finds no answer, and exits 69, not 75.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_wait_that_ends_on_a_silent_server_exits_unavailable() {
    let fixture = support::redis_fixture().await;
    let url = fixture.url.as_str();
    let server = url.trim_start_matches("redis://").to_owned();
    let link = distlock_testkit::proxy::FaultProxy::start(server.parse().unwrap())
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let (held, go) = (work.path().join("held"), work.path().join("go"));
    let mut holder = cmd(Some(url), "run --ttl 10s jobs/silent -- sh -c");
    holder.arg(format!(
        r#"touch "{}"; while [ ! -e "{}" ]; do sleep 0.02; done"#,
        held.display(),
        go.display()
    ));
    let holder = spawn_piped(&mut holder);
    wait_for_file(&held, BOUND).await;

    let waiter_url = format!("redis://{}", link.addr());
    let waiter = spawn_piped(&mut cmd(
        Some(&waiter_url),
        "run --ttl 10s --wait 3s jobs/silent -- true",
    ));
    tokio::time::timeout(BOUND, async {
        loop {
            let shown =
                output_within(BOUND, &mut cmd(Some(url), "status jobs/silent --json")).await;
            let status: serde_json::Value =
                serde_json::from_slice(&shown.stdout).unwrap_or_default();
            if status["waiters"].as_array().is_some_and(|w| !w.is_empty()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the waiter queues");
    // The server goes silent for the waiter: nothing it sends arrives.
    link.blackhole();
    let gave_up = tokio::time::timeout(BOUND, waiter.wait_with_output())
        .await
        .expect("the waiter gives up")
        .unwrap();
    assert_eq!(
        gave_up.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&gave_up)
    );
    assert!(
        stderr(&gave_up).contains("could not reach"),
        "{}",
        stderr(&gave_up)
    );
    std::fs::write(&go, "").unwrap();
    let holder = tokio::time::timeout(BOUND, holder.wait_with_output())
        .await
        .expect("the holder finishes")
        .unwrap();
    assert!(holder.status.success(), "{}", stderr(&holder));
}
