//! The advisory layout shares its locks with any client of the same keys:
//! `psql` in another process, both ways.

mod support;

use std::io::Write;
use std::process::{Child, Stdio};
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_testkit::servers::PostgresServer;
use support::{advisory_client, advisory_key, start_postgres};

const SLACK: Duration = Duration::from_secs(10);

/// A `psql` process that takes `key`'s advisory lock and keeps its session
/// open until killed.
fn psql_holding(server: &PostgresServer, key_sql: &str) -> Child {
    let mut child = server
        .psql()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start psql");
    writeln!(
        child.stdin.as_mut().unwrap(),
        "SELECT pg_advisory_lock({key_sql});"
    )
    .expect("send to psql");
    child
}

/// Tries `name` until it is held by someone else.
async fn until_busy(backend: &distlock_postgres::PostgresBackend, name: &str) {
    tokio::time::timeout(SLACK, async {
        loop {
            match backend.try_lock(name).await {
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Ok(guard) => guard.release().await.expect("release"),
                Err(e) => panic!("{e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("psql takes the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_by_psql_blocks_us_until_psql_lets_go() {
    let server = start_postgres().await;
    let backend = advisory_client(&server).await;
    for (name, key_sql) in [
        ("4242", "4242".to_owned()),
        (
            "jobs/nightly",
            "hashtextextended('jobs/nightly', 0)".to_owned(),
        ),
    ] {
        let mut psql = psql_holding(&server, &key_sql);
        until_busy(&backend, name).await;
        let waiter = tokio::spawn({
            let backend = backend.clone();
            let name = name.to_owned();
            async move { backend.lock(&name).await }
        });
        // psql's session ends: the server frees its lock, and we get it.
        psql.kill().expect("kill psql");
        psql.wait().expect("reap psql");
        let guard = tokio::time::timeout(SLACK, waiter)
            .await
            .expect("we get the lock")
            .expect("task")
            .expect("lock");
        if name == "4242" {
            assert_eq!(advisory_key(&guard), 4242);
        }
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_we_hold_is_busy_for_psql_until_released() {
    let server = start_postgres().await;
    let backend = advisory_client(&server).await;
    let guard = backend.lock("reports/daily").await.expect("lock");
    let try_sql = "SELECT pg_try_advisory_lock(hashtextextended('reports/daily', 0))";
    assert_eq!(server.query(try_sql).expect("psql"), "f");
    let first = guard.token();
    guard.release().await.expect("release");
    // psql's session takes it and ends, freeing it again.
    assert_eq!(server.query(try_sql).expect("psql"), "t");
    let again = backend.lock("reports/daily").await.expect("lock again");
    assert!(again.token() > first, "tokens rise across our holders");
    again.release().await.expect("release");
}
