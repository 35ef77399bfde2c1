//! Fenced transactions: a holder whose lease ran out has its late
//! transaction refused, or, if it checked its fence in time, the next
//! holder waits for its commit. A counter updated non-atomically ends exact.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_postgres::tokio_postgres::Client;
use distlock_postgres::{Fence, PostgresBackend};
use distlock_testkit::servers::PostgresServer;
use support::{TTL, client, sql_client, start_postgres};

const SLACK: Duration = Duration::from_secs(5);

async fn counter_table(server: &PostgresServer) -> Client {
    let sql = sql_client(server).await;
    sql.batch_execute(
        "CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL, last_token bigint);
         INSERT INTO counter VALUES (1, 0, NULL);",
    )
    .await
    .expect("create the counter");
    sql
}

/// Reads the counter, then writes it plus one: not atomic on its own.
async fn increment(
    backend: &PostgresBackend,
    sql: &mut Client,
    fence: &Fence,
) -> distlock_core::Result<i64> {
    let token = i64::try_from(fence.token().get()).unwrap();
    backend
        .fenced_transaction(sql, fence, move |tx| {
            Box::pin(async move {
                let n: i64 = tx
                    .query_one("SELECT n FROM counter WHERE id = 1", &[])
                    .await?
                    .get(0);
                tx.execute(
                    "UPDATE counter SET n = $1, last_token = $2 WHERE id = 1",
                    &[&(n + 1), &token],
                )
                .await?;
                Ok(n + 1)
            })
        })
        .await
}

async fn count(sql: &Client) -> i64 {
    sql.query_one("SELECT n FROM counter WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_transaction_of_an_expired_holder_is_refused() {
    let server = start_postgres().await;
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
    assert_eq!(count(&sql_b).await, 2);
    guard_b.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_the_fenced_transaction_that_checked_in_time() {
    let server = start_postgres().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let (mut sql_a, watcher) = (counter_table(&server).await, sql_client(&server).await);
    let guard_a = a.lock("fenced/inflight").await.expect("lock");
    let fence_a = Fence::of(&guard_a);
    guard_a.abandon();
    let token_a = i64::try_from(fence_a.token().get()).unwrap();
    let (checked_tx, checked_rx) = tokio::sync::oneshot::channel::<()>();
    let (commit_tx, commit_rx) = tokio::sync::oneshot::channel::<()>();
    // A checks its fence while its lease is valid, then works on past
    // expiry (a statement every TTL/4: an idle one would be ended by the
    // server after a TTL).
    let late = tokio::spawn(async move {
        a.fenced_transaction(&mut sql_a, &fence_a, move |tx| {
            Box::pin(async move {
                let _ = checked_tx.send(());
                tokio::pin!(commit_rx);
                loop {
                    tokio::select! {
                        _ = &mut commit_rx => break,
                        () = tokio::time::sleep(TTL / 4) => {
                            tx.execute("SELECT 1", &[]).await?;
                        }
                    }
                }
                let n: i64 = tx
                    .query_one("SELECT n FROM counter WHERE id = 1", &[])
                    .await?
                    .get(0);
                tx.execute("UPDATE counter SET n = $1 WHERE id = 1", &[&(n + 1)])
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
            let expired: bool = watcher
                .query_one(
                    "SELECT coalesce(bool_and(expires_at <= clock_timestamp()), true) \
                     FROM distlock.entries WHERE token = $1",
                    &[&token_a],
                )
                .await
                .unwrap()
                .get(0);
            if expired {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("A's lease runs out");
    // B's acquisition cannot have got in: A's transaction holds the row.
    tokio::time::sleep(TTL / 3).await;
    assert!(
        !contender.is_finished(),
        "B got in during A's fenced transaction"
    );
    let _ = commit_tx.send(());
    tokio::time::timeout(SLACK, late)
        .await
        .expect("A commits")
        .expect("A's task")
        .expect("A's transaction checked in time and commits");
    let (b, guard_b) = tokio::time::timeout(SLACK, contender)
        .await
        .expect("B gets in after A's commit")
        .expect("B's task");
    assert!(guard_b.token() > fence_a_token(token_a));
    let mut sql_b = sql_client(&server).await;
    assert_eq!(
        increment(&b, &mut sql_b, &Fence::of(&guard_b))
            .await
            .unwrap(),
        2
    );
    guard_b.release().await.expect("release");
}

fn fence_a_token(token: i64) -> distlock_core::FencingToken {
    distlock_core::FencingToken(u64::try_from(token).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contending_fenced_increments_count_exactly() {
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 10;
    let server = start_postgres().await;
    let sql = counter_table(&server).await;
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
    assert_eq!(count(&sql).await, (CLIENTS * ROUNDS) as i64);
}
