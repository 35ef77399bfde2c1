//! The table layout's wake signal against a real MariaDB: a mutex waiter
//! at the head of the queue blocks in `GET_LOCK` on the holder's wake
//! lock, is granted once the holder releases, and still gets in (by
//! polling) when the session keeping the signal dies.

mod support;

use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_mysql::DEFAULT_TABLE_PREFIX;
use distlock_mysql::mysql_async::Conn;
use distlock_mysql::mysql_async::prelude::Queryable;
use distlock_testkit::servers::MariadbServer;
use sha2::{Digest, Sha256};
use support::{client, sql_client, start_mariadb};
use tokio::time::{Instant, timeout};

/// How long any awaited event may take on a busy machine.
const WITHIN: Duration = Duration::from_secs(10);

/// The wake signal of the mutex `name`, as lock-mysql/docs.md gives it.
fn wake_name(server: &MariadbServer, name: &str) -> String {
    let database = server
        .url()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut digest = Sha256::new();
    for part in [
        database.as_str(),
        DEFAULT_TABLE_PREFIX,
        &format!("lock/{name}"),
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    let hex = hex::encode(digest.finalize());
    format!("distlock wake:{}", &hex[..50])
}

/// The session holding `wake`, if any.
async fn wake_holder(conn: &mut Conn, wake: &str) -> Option<u64> {
    let id: Option<Option<u64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (wake,))
        .await
        .expect("IS_USED_LOCK");
    id.flatten()
}

/// Waits until a session other than `holder` holds `wake`.
async fn wait_for_wake_holder(conn: &mut Conn, wake: &str, not: Option<u64>) -> u64 {
    let until = Instant::now() + WITHIN;
    loop {
        if let Some(id) = wake_holder(conn, wake).await
            && Some(id) != not
        {
            return id;
        }
        assert!(Instant::now() < until, "nobody took the wake signal {wake}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until some session other than `holder` is blocked in `GET_LOCK`.
async fn wait_for_blocked_waiter(conn: &mut Conn, holder: u64) {
    let until = Instant::now() + WITHIN;
    loop {
        let blocked: Option<u64> = conn
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                  WHERE INFO LIKE 'SELECT GET_LOCK%' AND ID <> ?",
                (holder,),
            )
            .await
            .expect("read the process list");
        if blocked.unwrap_or(0) > 0 {
            return;
        }
        assert!(
            Instant::now() < until,
            "no waiter blocked on the wake signal"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_blocked_on_the_wake_signal_is_granted_after_the_release() {
    let server = start_mariadb().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let mut sql = sql_client(&server).await;
    let wake = wake_name(&server, "jobs");
    let held = a.lock("jobs").await.expect("a locks");
    // Granted with nobody behind, the holder takes the signal after its
    // first renewal.
    let signal = wait_for_wake_holder(&mut sql, &wake, None).await;
    let waiter = tokio::spawn(async move {
        let guard = b.lock("jobs").await.expect("b locks");
        (b, guard)
    });
    wait_for_blocked_waiter(&mut sql, signal).await;
    assert!(!waiter.is_finished(), "b got in while a held the lock");
    let first = held.token();
    held.release().await.expect("a releases");
    let (_b, guard) = timeout(WITHIN, waiter)
        .await
        .expect("b is granted after the release")
        .expect("b's task");
    assert!(guard.token() > first, "tokens went back");
    // The waiter that was granted keeps the signal for the next one, and
    // its release lets go of it.
    let kept = wake_holder(&mut sql, &wake).await;
    assert!(kept.is_some_and(|id| id != signal), "b keeps the signal");
    guard.release().await.expect("b releases");
    assert_eq!(wake_holder(&mut sql, &wake).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_still_gets_in_when_the_signals_session_dies() {
    let server = start_mariadb().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let mut sql = sql_client(&server).await;
    let wake = wake_name(&server, "jobs");
    let held = a.lock("jobs").await.expect("a locks");
    let signal = wait_for_wake_holder(&mut sql, &wake, None).await;
    let waiter = tokio::spawn(async move {
        let guard = b.lock("jobs").await.expect("b locks");
        (b, guard)
    });
    wait_for_blocked_waiter(&mut sql, signal).await;
    sql.query_drop(format!("KILL CONNECTION {signal}"))
        .await
        .expect("kill the session keeping the signal");
    // The signal came free without a release: the waiter looks, finds the
    // grant still there and keeps waiting; the holder's next renewal
    // takes the signal again.
    wait_for_wake_holder(&mut sql, &wake, Some(signal)).await;
    assert!(!waiter.is_finished(), "a dead signal let b in");
    assert!(held.is_held(), "a's lease suffered from its signal's death");
    let first = held.token();
    held.release().await.expect("a releases");
    let (_b, guard) = timeout(WITHIN, waiter)
        .await
        .expect("b is granted after the release")
        .expect("b's task");
    assert!(guard.token() > first, "tokens went back");
    guard.release().await.expect("b releases");
}
