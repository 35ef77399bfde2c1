//! `distlock run` on Redis with `layout=plain` shares its lock with
//! redis-py's `Lock`, each in a process of its own: a run waits while
//! redis-py holds the key and starts its command once redis-py releases;
//! while a run holds it, redis-py's non-blocking acquire fails.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use distlock_testkit::assert::within;
use distlock_testkit::lock_peer::{Library, LockPeer};
use distlock_testkit::servers::{RedisServer, RespReply};
use support::{BOUND, cmd, spawn_piped, stderr, wait_for_file};

async fn redis() -> RedisServer {
    RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

fn plain_url(server: &RedisServer) -> String {
    format!("redis://127.0.0.1:{}/?layout=plain", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waits_while_redis_py_holds_the_lock_and_starts_once_it_releases() {
    let server = redis().await;
    let mut peer = LockPeer::start(
        Library::RedisPy,
        server.port(),
        "jobs",
        Duration::from_secs(20),
    );
    assert_eq!(peer.ask("try"), "acquired");
    let work = tempfile::tempdir().unwrap();
    let ran = work.path().join("ran");
    let mut run = cmd(Some(&plain_url(&server)), "run --wait 20s jobs -- sh -c");
    run.arg(format!(r#"touch "{}""#, ran.display()));
    let run = spawn_piped(&mut run);
    // The run is waiting once it has registered as a waiter.
    within(BOUND, "the run waits", async {
        let waiters = ["ZCARD", "distlock:plain:{jobs}:waiters"];
        while server.command(&waiters).await.expect("ZCARD") != RespReply::Integer(1) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        !ran.exists(),
        "the command ran while redis-py held the lock"
    );
    assert_eq!(peer.ask("release"), "released");
    let output = within(BOUND, "the run finishes", run.wait_with_output())
        .await
        .expect("wait for distlock");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(ran.exists(), "the command did not run");
    assert_eq!(peer.ask("try"), "acquired", "the run left the lock behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_run_holds_the_lock_redis_py_cannot_take_it() {
    let server = redis().await;
    let work = tempfile::tempdir().unwrap();
    let (held, go) = (work.path().join("held"), work.path().join("go"));
    let mut run = cmd(Some(&plain_url(&server)), "run jobs -- sh -c");
    run.arg(format!(
        r#"touch "{}"; while [ ! -e "{}" ]; do sleep 0.02; done"#,
        held.display(),
        go.display()
    ));
    let run = spawn_piped(&mut run);
    wait_for_file(&held, BOUND).await;
    let mut peer = LockPeer::start(
        Library::RedisPy,
        server.port(),
        "jobs",
        Duration::from_secs(5),
    );
    assert_eq!(peer.ask("try"), "busy", "redis-py got a lock a run holds");
    std::fs::write(&go, "").unwrap();
    let output = within(BOUND, "the run finishes", run.wait_with_output())
        .await
        .expect("wait for distlock");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(peer.ask("try"), "acquired", "the run released the lock");
    assert_eq!(peer.ask("release"), "released");
}
