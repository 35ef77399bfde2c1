//! The named layout shares its locks with any client of the same names:
//! a lock held by distlock excludes `GET_LOCK` from the `mariadb` client,
//! and a lock the `mariadb` client holds excludes distlock, across
//! processes.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt, LockName};
use distlock_mysql::named_lock_name;
use support::{named_client, start_mariadb};

/// Runs `sql` in a `mariadb` client process and returns its output.
async fn mariadb(server: &distlock_testkit::servers::MariadbServer, sql: &str) -> String {
    let mut command = tokio::process::Command::from(server.client());
    command.args(["-e", sql]).stdin(Stdio::null());
    let output = tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .expect("the mariadb client answers")
        .expect("run the mariadb client");
    assert!(
        output.status.success(),
        "mariadb -e {sql:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_distlock_excludes_the_mariadb_client() {
    let server = start_mariadb().await;
    let backend = named_client(&server).await;
    let guard = backend.lock("jobs").await.expect("lock");
    assert_eq!(
        mariadb(&server, "SELECT GET_LOCK('jobs', 0)").await,
        "0",
        "the client got a lock distlock holds"
    );
    assert_ne!(
        mariadb(&server, "SELECT IS_USED_LOCK('jobs')").await,
        "NULL"
    );
    guard.release().await.expect("release");
    assert_eq!(
        mariadb(
            &server,
            "SELECT GET_LOCK('jobs', 0); SELECT RELEASE_LOCK('jobs')"
        )
        .await,
        "1\n1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_the_mariadb_client_excludes_distlock() {
    let server = start_mariadb().await;
    let backend = named_client(&server).await;
    // A client process that takes the lock, says so, and holds it until
    // its standard input closes.
    let mut holder = server.client();
    let mut holder = holder
        .args(["--unbuffered"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the mariadb client");
    let mut stdin = holder.stdin.take().expect("stdin");
    writeln!(stdin, "SELECT GET_LOCK('jobs', 10);").expect("send");
    let stdout = holder.stdout.take().expect("stdout");
    let granted = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(20), granted)
        .await
        .expect("the client takes the lock")
        .unwrap()
        .unwrap();
    assert_eq!(line.trim(), "1");
    let err = backend.try_lock("jobs").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let waiting = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.lock("jobs").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "distlock got in while the client held it"
    );
    // The client process ends: its session goes, and distlock gets in.
    drop(stdin);
    let _ = tokio::task::spawn_blocking(move || holder.wait()).await;
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("distlock gets in once the client is gone")
        .unwrap()
        .expect("lock");
    guard.release().await.expect("release");
}

#[test]
fn long_names_hash_to_a_stable_64_character_name() {
    let short = LockName::new("jobs/nightly").unwrap();
    assert_eq!(named_lock_name("app/", &short), "app/jobs/nightly");
    let long = LockName::new("x".repeat(100)).unwrap();
    let hashed = named_lock_name("", &long);
    assert_eq!(hashed.chars().count(), 64);
    // The documented form: `distlock:` and the SHA-256 of the name, in hex.
    assert_eq!(
        hashed, "distlock:09ecb6ebc8bcefc733f6f2ec44f791abeed6a99edf0cc3151963789",
        "the hash of 100 x's must never change"
    );
}
