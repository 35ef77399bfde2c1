//! The advisory layout keeps a cleanly released session for the next
//! acquisition, and never one that might still hold a lock.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_testkit::servers::PostgresServer;
use support::{advisory_client, advisory_key, sql_client, start_postgres, terminate_holder};

/// The server processes of distlock sessions now connected.
async fn distlock_sessions(server: &PostgresServer) -> Vec<i32> {
    let client = sql_client(server).await;
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'distlock' ORDER BY pid",
            &[],
        )
        .await
        .expect("read pg_stat_activity")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The server process that holds advisory `key`, if any.
async fn holder_pid(server: &PostgresServer, key: i64) -> Option<i32> {
    let client = sql_client(server).await;
    client
        .query_opt(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
               AND ((classid::bigint << 32) | objid::bigint) = $1",
            &[&key],
        )
        .await
        .expect("read pg_locks")
        .map(|row| row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_session_is_reused_and_holds_nothing() {
    let server = start_postgres().await;
    let backend = advisory_client(&server).await;
    let first = backend.lock("reuse/a").await.expect("lock");
    let pid = holder_pid(&server, advisory_key(&first))
        .await
        .expect("held");
    first.release().await.expect("release");
    let before = distlock_sessions(&server).await;
    let mut last_token = 0;
    for i in 0..20 {
        let name = format!("reuse/{}", i % 3);
        let guard = backend.lock(name.as_str()).await.expect("lock");
        assert!(guard.token().get() > last_token, "tokens rise");
        last_token = guard.token().get();
        assert_eq!(
            holder_pid(&server, advisory_key(&guard)).await,
            Some(pid),
            "the released session is taken again"
        );
        guard.release().await.expect("release");
        // Released: the kept session holds no advisory lock at all.
        let held: i64 = sql_client(&server)
            .await
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1",
                &[&pid],
            )
            .await
            .expect("read pg_locks")
            .get(0);
        assert_eq!(held, 0, "a kept session holds nothing");
    }
    assert_eq!(
        distlock_sessions(&server).await,
        before,
        "no new connection per acquisition"
    );
    // A try_lock that finds the lock busy keeps its session too, holding
    // nothing: the other side takes the lock afterwards.
    let other = advisory_client(&server).await;
    let held = other.lock("reuse/busy").await.expect("lock");
    let err = backend.try_lock("reuse/busy").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    held.release().await.expect("release");
    backend
        .try_lock("reuse/busy")
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_lease_was_lost_is_never_reused() {
    let server = start_postgres().await;
    let backend = advisory_client(&server).await;
    let guard = backend.lock("lost/a").await.expect("lock");
    let key = advisory_key(&guard);
    let pid = holder_pid(&server, key).await.expect("held");
    terminate_holder(&server, &guard).await;
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    let next = tokio::time::timeout(Duration::from_secs(10), backend.lock("lost/a"))
        .await
        .expect("not stuck on a dead session")
        .expect("lock on a new session");
    let now = holder_pid(&server, advisory_key(&next))
        .await
        .expect("held");
    assert_ne!(now, pid, "a new session, not the terminated one");
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_closes_its_session() {
    let server = start_postgres().await;
    let backend = advisory_client(&server).await;
    let guard = backend.lock("dropped/a").await.expect("lock");
    let key = advisory_key(&guard);
    let pid = holder_pid(&server, key).await.expect("held");
    drop(guard);
    // The lock is free again (its session closed), for anyone.
    let other = advisory_client(&server).await;
    let taken = tokio::time::timeout(Duration::from_secs(10), other.lock("dropped/a"))
        .await
        .expect("freed")
        .expect("lock");
    assert_ne!(holder_pid(&server, key).await, Some(pid));
    taken.release().await.expect("release");
}
