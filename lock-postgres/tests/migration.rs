//! The lock tables are created once, upgraded in place, and never
//! altered again by a client that finds them current, whatever traffic
//! runs on them.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::{LockBackend, LockBackendExt, LockName};
use distlock_postgres::{Fence, PostgresBackend};
use distlock_testkit::servers::PostgresServer;
use support::{client, config_for, sql_client, start_postgres};
use tokio::task::JoinHandle;

#[tokio::test]
async fn the_schema_records_its_version_and_a_second_client_reuses_it() {
    let server = start_postgres().await;
    let _first = client(&server).await;
    let _second = client(&server).await;
    let version = server
        .query("SELECT string_agg(version::text, ',') FROM distlock.migrations")
        .expect("read the migrations");
    assert_eq!(version, "4");
    assert_lock_waits_are_bounded(&server);
}

/// Every lock function bounds its lock waits, so that one stuck
/// transaction cannot hold up the statements pipelined behind it.
fn assert_lock_waits_are_bounded(server: &distlock_testkit::servers::PostgresServer) {
    let unbounded = server
        .query(
            "SELECT coalesce(string_agg(p.proname, ',' ORDER BY p.proname), '') \
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
              WHERE n.nspname = 'distlock' \
                AND p.proname IN ('acquire', 'release', 'proclaim', 'force_release', 'hand_over') \
                AND NOT coalesce('lock_timeout=1s' = ANY (p.proconfig), false)",
        )
        .expect("read the functions' settings");
    assert_eq!(unbounded, "", "functions without lock_timeout");
}

/// A schema left at version 1 (no targeted wake-ups, no grants made by
/// the release) is upgraded in place
/// by the next client to connect, and its locks hand over as before.
#[tokio::test]
async fn a_version_1_schema_is_upgraded_in_place() {
    let server = start_postgres().await;
    drop(client(&server).await);
    server
        .query(
            "DELETE FROM distlock.migrations; INSERT INTO distlock.migrations (version) VALUES (1); \
             DROP FUNCTION distlock.wake(text) CASCADE; \
             DROP FUNCTION distlock.hand_over(text) CASCADE; \
             DROP FUNCTION distlock.remove_expired(text) CASCADE; \
             ALTER FUNCTION distlock.acquire RESET ALL; \
             ALTER TABLE distlock.entries DROP COLUMN ttl_ms",
        )
        .expect("set the schema back to version 1");
    let long = || PostgresBackend::connect(config_for(&server).with_ttl(Duration::from_secs(30)));
    let (a, b, observer) = (
        long().await.expect("connect"),
        long().await.expect("connect"),
        client(&server).await,
    );
    let version = server
        .query("SELECT string_agg(version::text, ',' ORDER BY version) FROM distlock.migrations")
        .expect("read the migrations");
    assert_eq!(version, "1,4");
    assert_lock_waits_are_bounded(&server);
    let held = a.lock("upgraded").await.expect("lock");
    let waiter = tokio::spawn(async move { b.lock("upgraded").await });
    let name = LockName::new("upgraded").unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while observer.inspect(&name).await.expect("inspect").waiting != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiter queues");
    held.release().await.expect("release");
    // Well within the 10 s re-check: the release's wake-up reached it.
    let next = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter is woken at once")
        .expect("task")
        .expect("lock");
    next.release().await.expect("release");
}

/// Concurrent first connections serialise on the migration lock. One that
/// waited there while another finished the migration must find the schema
/// current and alter nothing: the tables are in use by then, and an
/// `ALTER TABLE` behind a lock holder that waits on the same key
/// deadlocks. Here the first migration's holder records the version, then
/// keeps a transaction open on the table, as a holder's release would
/// while it waits for the key; the waiting client must connect anyway.
#[tokio::test]
async fn a_client_that_waited_for_another_migration_leaves_the_tables_alone() {
    let server = start_postgres().await;
    drop(client(&server).await);
    server
        .query(
            "DELETE FROM distlock.migrations; INSERT INTO distlock.migrations (version) VALUES (3)",
        )
        .expect("set the recorded version back to 3");
    let first = sql_client(&server).await;
    let migration_lock = "hashtextextended('distlock migration distlock', 0)";
    first
        .batch_execute(&format!("SELECT pg_advisory_lock({migration_lock})"))
        .await
        .expect("take the migration lock");
    let connecting = tokio::spawn(PostgresBackend::connect(config_for(&server)));
    tokio::time::timeout(Duration::from_secs(10), async {
        let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
        while first
            .query_one(waiting, &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the connecting client waits for the migration lock");
    first
        .batch_execute("INSERT INTO distlock.migrations (version) VALUES (4)")
        .await
        .expect("finish the migration");
    first
        .batch_execute(&format!(
            "BEGIN; SELECT count(*) FROM distlock.entries; \
             SELECT pg_advisory_unlock({migration_lock})"
        ))
        .await
        .expect("use the table, and let the waiting client in");
    let backend = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .expect("the client connects without waiting for the table")
        .expect("task")
        .expect("connect");
    first.batch_execute("COMMIT").await.expect("commit");
    backend
        .lock("migrated")
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
}

/// Connects `n` clients of `server` at once; the errors of those that failed.
async fn connect_at_once(server: &PostgresServer, n: usize) -> Vec<String> {
    let connecting: Vec<_> = (0..n)
        .map(|_| tokio::spawn(PostgresBackend::connect(config_for(server))))
        .collect();
    let mut failed = Vec::new();
    for connect in connecting {
        match connect.await.expect("connect task") {
            Ok(backend) => drop(backend),
            Err(e) => failed.push(e.to_string()),
        }
    }
    failed
}

#[tokio::test]
async fn clients_connecting_at_once_to_a_fresh_schema_all_succeed() {
    let server = start_postgres().await;
    let failed = connect_at_once(&server, 12).await;
    assert!(failed.is_empty(), "connects that failed: {failed:#?}");
    let version = server
        .query("SELECT string_agg(version::text, ',') FROM distlock.migrations")
        .expect("read the migrations");
    assert_eq!(version, "4");
}

/// Lock traffic that runs until `stop`: a client taking and releasing
/// `key`, and, when `fenced`, running a 30 ms fenced transaction while it
/// holds it (its holder's row stays locked meanwhile). Answers how many
/// rounds it made and what failed. The lease is long, so that only the
/// migration, never a busy machine, could make an operation fail.
async fn traffic(
    server: &PostgresServer,
    key: String,
    fenced: bool,
    stop: Arc<AtomicBool>,
) -> JoinHandle<(usize, Vec<String>)> {
    let backend = PostgresBackend::connect(config_for(server).with_ttl(Duration::from_secs(10)))
        .await
        .expect("connect");
    let mut sql = sql_client(server).await;
    tokio::spawn(async move {
        let (mut rounds, mut failed) = (0, Vec::new());
        while !stop.load(Ordering::Relaxed) {
            let guard = match backend.lock(&key).await {
                Ok(guard) => guard,
                Err(e) => {
                    failed.push(format!("lock {key}: {e}"));
                    continue;
                }
            };
            if fenced {
                let fence = Fence::of(&guard);
                let fenced = backend.fenced_transaction(&mut sql, &fence, |tx| {
                    Box::pin(async move { tx.execute("SELECT pg_sleep(0.03)", &[]).await })
                });
                if let Err(e) = fenced.await {
                    failed.push(format!("fenced transaction on {key}: {e}"));
                }
            }
            if let Err(e) = guard.release().await {
                failed.push(format!("release {key}: {e}"));
            }
            rounds += 1;
        }
        (rounds, failed)
    })
}

/// A live upgrade: clients connect, a dozen at a time, to a schema
/// recorded at the previous version (so the first of them runs the whole
/// script, with its `ALTER TABLE`) while other clients take, fence and
/// release locks on its tables. No connect and no lock operation fails:
/// the migration takes the table's exclusive lock before any weaker one,
/// gives way within 200 ms to the transactions ahead of it, and tries
/// again. (Before, about one upgrade in eight here aborted a client with
/// `deadlock detected`, and lock functions queued behind the migration
/// timed out or were chosen as the deadlock victim.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_connecting_at_once_during_a_live_upgrade_all_succeed() {
    let server = start_postgres().await;
    let admin = sql_client(&server).await;
    drop(client(&server).await);
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Vec::new();
    for i in 0..6 {
        let (key, fenced) = (format!("traffic/{}", i % 3), i < 2);
        running.push(traffic(&server, key, fenced, stop.clone()).await);
    }
    let mut failed = Vec::new();
    for upgrade in 0..20 {
        admin
            .batch_execute(
                "DELETE FROM distlock.migrations; \
                 INSERT INTO distlock.migrations (version) VALUES (3)",
            )
            .await
            .expect("record the previous version");
        for e in connect_at_once(&server, 12).await {
            failed.push(format!("upgrade {upgrade}: connect: {e}"));
        }
        let version = server
            .query(
                "SELECT string_agg(version::text, ',' ORDER BY version) FROM distlock.migrations",
            )
            .expect("read the migrations");
        assert_eq!(version, "3,4", "upgrade {upgrade}");
    }
    stop.store(true, Ordering::Relaxed);
    for task in running {
        let (rounds, errors) = task.await.expect("traffic task");
        assert!(rounds > 0, "a traffic client made no round");
        failed.extend(errors);
    }
    assert!(
        failed.is_empty(),
        "failed during live upgrades: {failed:#?}"
    );
}
