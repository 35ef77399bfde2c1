//! Fenced transactions: a holder whose lease ran out has its late
//! transaction refused, or, if it checked its fence in time, the next
//! holder waits for its commit. A counter updated non-atomically ends exact.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_mysql::mysql_async::Conn;
use distlock_mysql::mysql_async::prelude::Queryable;
use distlock_mysql::{Fence, MysqlBackend};
use distlock_testkit::servers::MariadbServer;
use support::{TTL, client, sql_client, start_mariadb};

const SLACK: Duration = Duration::from_secs(5);

async fn counter_table(server: &MariadbServer) -> Conn {
    let mut sql = sql_client(server).await;
    sql.query_drop(
        "CREATE TABLE counter (id INT PRIMARY KEY, n BIGINT NOT NULL, last_token BIGINT UNSIGNED) \
         ENGINE=InnoDB",
    )
    .await
    .expect("create the counter");
    sql.query_drop("INSERT INTO counter VALUES (1, 0, NULL)")
        .await
        .expect("seed the counter");
    sql
}

/// Reads the counter, then writes it plus one: not atomic on its own.
async fn increment(
    backend: &MysqlBackend,
    sql: &mut Conn,
    fence: &Fence,
) -> distlock_core::Result<i64> {
    let token = fence.token().get();
    backend
        .fenced_transaction(sql, fence, move |tx| {
            Box::pin(async move {
                let n: i64 = tx
                    .query_first("SELECT n FROM counter WHERE id = 1")
                    .await?
                    .unwrap_or(0);
                tx.exec_drop(
                    "UPDATE counter SET n = ?, last_token = ? WHERE id = 1",
                    (n + 1, token),
                )
                .await?;
                Ok(n + 1)
            })
        })
        .await
}

async fn count(sql: &mut Conn) -> i64 {
    sql.query_first("SELECT n FROM counter WHERE id = 1")
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_transaction_of_an_expired_holder_is_refused() {
    let server = start_mariadb().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let (mut sql_a, mut sql_b) = (counter_table(&server).await, sql_client(&server).await);
    let guard_a = a.lock("fenced/late").await.expect("lock");
    let fence_a = Fence::of(&guard_a);
    assert_eq!(increment(&a, &mut sql_a, &fence_a).await.unwrap(), 1);
    // A stops renewing, as a paused process would; B takes over after the TTL.
    guard_a.abandon();
    let guard_b = tokio::time::timeout(TTL * 3 + SLACK, b.lock("fenced/late"))
        .await
        .expect("B takes over in time")
        .expect("lock");
    assert!(guard_b.token() > fence_a.token());
    let err = increment(&a, &mut sql_a, &fence_a).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(
        increment(&b, &mut sql_b, &Fence::of(&guard_b))
            .await
            .unwrap(),
        2
    );
    assert_eq!(count(&mut sql_b).await, 2);
    guard_b.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_the_fenced_transaction_that_checked_in_time() {
    let server = start_mariadb().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let (mut sql_a, mut watcher) = (counter_table(&server).await, sql_client(&server).await);
    let guard_a = a.lock("fenced/inflight").await.expect("lock");
    let fence_a = Fence::of(&guard_a);
    guard_a.abandon();
    let token_a = fence_a.token();
    let (checked_tx, checked_rx) = tokio::sync::oneshot::channel::<()>();
    // A checks its fence while its lease is valid, then works past expiry
    // (a statement runs all along, so the session is never idle).
    let work_secs = TTL.as_secs_f64() * 2.5;
    let late = tokio::spawn(async move {
        a.fenced_transaction(&mut sql_a, &fence_a, move |tx| {
            Box::pin(async move {
                let _ = checked_tx.send(());
                tx.query_drop(format!("DO SLEEP({work_secs})")).await?;
                let n: i64 = tx
                    .query_first("SELECT n FROM counter WHERE id = 1")
                    .await?
                    .unwrap_or(0);
                tx.exec_drop("UPDATE counter SET n = ? WHERE id = 1", (n + 1,))
                    .await?;
                Ok(())
            })
        })
        .await
    });
    tokio::time::timeout(SLACK, checked_rx)
        .await
        .expect("A checks in time")
        .expect("A's check");
    let contender = tokio::spawn(async move {
        let guard = b.lock("fenced/inflight").await.expect("lock");
        (b, guard)
    });
    // Wait, by the server's clock, until A's lease has run out.
    tokio::time::timeout(TTL * 3 + SLACK, async {
        loop {
            let expired: Option<i64> = watcher
                .exec_first(
                    "SELECT COUNT(*) = 0 FROM distlock_entries \
                      WHERE token = ? AND expires_at > UTC_TIMESTAMP(6)",
                    (token_a.get(),),
                )
                .await
                .unwrap();
            if expired == Some(1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("A's lease runs out");
    // B's acquisition cannot have got in: A's transaction holds the key.
    tokio::time::sleep(TTL / 3).await;
    assert!(
        !contender.is_finished(),
        "B got in during A's fenced transaction"
    );
    tokio::time::timeout(TTL * 3 + SLACK, late)
        .await
        .expect("A commits")
        .expect("A's task")
        .expect("A's transaction checked in time and commits");
    let (b, guard_b) = tokio::time::timeout(SLACK, contender)
        .await
        .expect("B gets in after A's commit")
        .expect("B's task");
    assert!(guard_b.token() > token_a);
    let mut sql_b = sql_client(&server).await;
    assert_eq!(
        increment(&b, &mut sql_b, &Fence::of(&guard_b))
            .await
            .unwrap(),
        2
    );
    guard_b.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_holder_idle_in_its_fenced_transaction_is_cut_off() {
    let server = start_mariadb().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let mut sql_a = counter_table(&server).await;
    let guard_a = a.lock("fenced/idle").await.expect("lock");
    let fence_a = Fence::of(&guard_a);
    guard_a.abandon();
    let (checked_tx, checked_rx) = tokio::sync::oneshot::channel::<()>();
    // A checks its fence, then sits idle inside the transaction far past
    // its TTL, as a paused process would.
    let late = tokio::spawn(async move {
        a.fenced_transaction(&mut sql_a, &fence_a, move |tx| {
            Box::pin(async move {
                let _ = checked_tx.send(());
                tokio::time::sleep(TTL * 4).await;
                tx.query_drop("UPDATE counter SET n = n + 100 WHERE id = 1")
                    .await?;
                Ok(())
            })
        })
        .await
    });
    tokio::time::timeout(SLACK, checked_rx)
        .await
        .expect("A checks in time")
        .expect("A's check");
    // The server ends A's idle session after about a TTL, so B gets in.
    let guard_b = tokio::time::timeout(TTL * 4 + SLACK, b.lock("fenced/idle"))
        .await
        .expect("B gets in once A's idle transaction is cut off")
        .expect("lock");
    let err = tokio::time::timeout(TTL * 4 + SLACK, late)
        .await
        .expect("A's transaction ends")
        .expect("A's task")
        .unwrap_err();
    assert!(
        err.is_retryable() || err.kind() == ErrorKind::Backend,
        "{err}"
    );
    let mut sql_b = sql_client(&server).await;
    assert_eq!(count(&mut sql_b).await, 0, "A's late write must not commit");
    guard_b.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contending_fenced_increments_count_exactly() {
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 10;
    let server = start_mariadb().await;
    let mut sql = counter_table(&server).await;
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let backend = client(&server).await;
        let mut sql = sql_client(&server).await;
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..ROUNDS {
                let guard = backend.lock("fenced/counter").await.expect("lock");
                assert!(guard.token().get() > last, "tokens must increase");
                last = guard.token().get();
                increment(&backend, &mut sql, &Fence::of(&guard))
                    .await
                    .expect("fenced increment");
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("in time")
            .expect("task");
    }
    assert_eq!(count(&mut sql).await, (CLIENTS * ROUNDS) as i64);
}
