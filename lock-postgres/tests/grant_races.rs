//! Exclusion under the races of a hand-over: a grant notification that
//! arrives after the waiter it names has queued again, a takeover past a
//! fenced transaction that checked in time, and a fenced holder paused
//! inside its transaction. Each interleaving is built step by step with
//! plain SQL against the real server, so every run takes the same path.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_postgres::tokio_postgres::Client;
use distlock_postgres::{Fence, PostgresBackend};
use distlock_testkit::servers::PostgresServer;
use support::{TTL, client, config_for, sql_client, start_postgres};

/// Longer than any wait below that must end.
const SLACK: Duration = Duration::from_secs(10);
/// So long that no waiter looks at its queue by its own timer meanwhile.
const LONG_TTL: Duration = Duration::from_secs(60);

/// Polls `probe` every 20 ms until it returns `Some`, within [`SLACK`].
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    tokio::time::timeout(SLACK, async {
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
}

/// The owner id and expiry (ms since the epoch) of `key`'s only waiting
/// entry, if it has one.
async fn waiting_entry(sql: &Client, key: &str) -> Option<(String, f64)> {
    let rows = sql
        .query(
            "SELECT owner::text, extract(epoch FROM expires_at)::float8 * 1000 \
               FROM distlock.entries WHERE key = $1 AND NOT granted",
            &[&key],
        )
        .await
        .expect("read the waiting entries");
    match rows.as_slice() {
        [row] => Some((row.get(0), row.get(1))),
        _ => None,
    }
}

/// A waiter queues again under its owner id after its earlier grant ran
/// out and was removed while it could not hear the notification naming
/// that grant (paused, or its listening connection slow). The late
/// notification must not make it a holder: the lock is someone else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_never_takes_a_grant_notified_before_it_queued_again() {
    let server = start_postgres().await;
    let connect = || PostgresBackend::connect(config_for(&server).with_ttl(LONG_TTL));
    let (holder, waiter) = (connect().await.unwrap(), connect().await.unwrap());
    let sql = sql_client(&server).await;
    let guard = holder.lock("races/stale-grant").await.expect("lock");
    let key = guard.key().to_owned();
    let queued = tokio::spawn(async move { waiter.lock("races/stale-grant").await });
    let (owner, _) = until("the waiter queues", || waiting_entry(&sql, &key)).await;

    // A release grants the waiter's entry and notifies it; the waiter does
    // not hear it yet. Its lease runs out unrenewed, and the next look at
    // the queue removes the expired grant.
    let stale: i64 = sql
        .query_one(
            "UPDATE distlock.entries SET granted = true, token = nextval('distlock.tokens'), \
                    granted_at = clock_timestamp(), expires_at = clock_timestamp() \
              WHERE owner = $1::text::uuid RETURNING token",
            &[&owner],
        )
        .await
        .expect("grant the waiter")
        .get(0);
    sql.execute(
        "DELETE FROM distlock.entries WHERE owner = $1::text::uuid",
        &[&owner],
    )
    .await
    .expect("remove the expired grant");
    // The waiter looks again (woken on the key channel): its entry is
    // gone, so it queues again under the same owner id.
    sql.execute("SELECT pg_notify('distlock_distlock', $1)", &[&key])
        .await
        .expect("wake the waiter");
    let (again, queued_at) = until("the waiter queues again", || waiting_entry(&sql, &key)).await;
    assert_eq!(again, owner, "the waiter queued under another owner id");

    // Only now does the notification of the old grant reach it.
    sql.execute(
        "SELECT pg_notify('distlockw_distlock', $1)",
        &[&format!("{owner}:{stale}")],
    )
    .await
    .expect("deliver the late notification");
    // It either takes the stale grant (the task ends) or, woken, looks at
    // its queue again (its entry's expiry moves).
    let took_it = until("the waiter acts on the notification", || async {
        if queued.is_finished() {
            return Some(true);
        }
        let (_, expires) = waiting_entry(&sql, &key).await?;
        (expires > queued_at).then_some(false)
    })
    .await;
    assert!(
        !took_it,
        "the waiter became a holder with token {stale}, from a notification older than its \
         entry, while {} holds the lock with token {}",
        guard.key(),
        guard.token()
    );

    guard.release().await.expect("release");
    let next = tokio::time::timeout(SLACK, queued)
        .await
        .expect("the waiter gets in after the release")
        .expect("task")
        .expect("lock");
    assert!(next.token().get() > u64::try_from(stale).unwrap());
    let stored: i64 = sql
        .query_one(
            "SELECT token FROM distlock.entries WHERE owner = $1::text::uuid AND granted",
            &[&owner],
        )
        .await
        .expect("the waiter's grant")
        .get(0);
    assert_eq!(next.token().get(), u64::try_from(stored).unwrap());
    next.release().await.expect("release");
}

/// A late notification the waiter refused does not keep it waiting past
/// its deadline: the wait still times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_late_notification_does_not_stop_a_wait_from_timing_out() {
    let server = start_postgres().await;
    let connect = || PostgresBackend::connect(config_for(&server).with_ttl(LONG_TTL));
    let (holder, waiter) = (connect().await.unwrap(), connect().await.unwrap());
    let sql = sql_client(&server).await;
    let guard = holder.lock("races/late-timeout").await.expect("lock");
    let key = guard.key().to_owned();
    let wait = Duration::from_secs(2);
    let queued = tokio::spawn(async move { waiter.lock_timeout("races/late-timeout", wait).await });
    let (owner, queued_at) = until("the waiter queues", || waiting_entry(&sql, &key)).await;
    // A token taken before the waiter's next look, as an earlier entry's
    // grant would have been.
    let stale: i64 = sql
        .query_one("SELECT nextval('distlock.tokens')", &[])
        .await
        .expect("take a token")
        .get(0);
    sql.execute("SELECT pg_notify('distlock_distlock', $1)", &[&key])
        .await
        .expect("wake the waiter");
    until("the waiter looks again", || async {
        let (_, expires) = waiting_entry(&sql, &key).await?;
        (expires > queued_at).then_some(())
    })
    .await;
    sql.execute(
        "SELECT pg_notify('distlockw_distlock', $1)",
        &[&format!("{owner}:{stale}")],
    )
    .await
    .expect("deliver the late notification");
    let err = tokio::time::timeout(wait + SLACK, queued)
        .await
        .expect("the wait ends at its deadline")
        .expect("task")
        .expect_err("the lock is held by someone else");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    guard.release().await.expect("release");
}

/// A waiting entry that no client looks after: it waits until someone
/// grants it.
async fn idle_waiter(sql: &Client, key: &str, holder: &str) -> String {
    sql.query_one(
        "INSERT INTO distlock.entries (key, owner, access, holder, expires_at, ttl_ms) \
         VALUES ($1, gen_random_uuid(), 'write', $2, clock_timestamp() + interval '1 hour', \
                 60000) RETURNING owner::text",
        &[&key, &holder],
    )
    .await
    .expect("queue a waiter")
    .get(0)
}

/// Whether `owner`'s entry is granted.
async fn granted(sql: &Client, owner: &str) -> bool {
    sql.query_one(
        "SELECT coalesce(bool_or(granted), false) FROM distlock.entries \
          WHERE owner = $1::text::uuid",
        &[&owner],
    )
    .await
    .expect("read the entry")
    .get(0)
}

/// Waits, by the server's clock, until the grant with `token` has run out.
async fn until_expired(sql: &Client, token: i64) {
    until("the lease runs out on the server", || async {
        let expired: bool = sql
            .query_one(
                "SELECT coalesce(bool_and(expires_at <= clock_timestamp()), true) \
                   FROM distlock.entries WHERE token = $1",
                &[&token],
            )
            .await
            .expect("read the lease")
            .get(0);
        expired.then_some(())
    })
    .await;
}

async fn counter_table(server: &PostgresServer) -> Client {
    let sql = sql_client(server).await;
    sql.batch_execute(
        "CREATE TABLE IF NOT EXISTS counter (id int PRIMARY KEY, n bigint NOT NULL);
         INSERT INTO counter VALUES (1, 0) ON CONFLICT DO NOTHING;",
    )
    .await
    .expect("create the counter");
    sql
}

/// How a fenced holder stalls inside its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    /// Still working: a statement every TTL/4, so never idle for long.
    Busy,
    /// Paused: nothing sent until it resumes.
    Paused,
}

/// Holds `backend`'s lock `name`, lets its lease run out unrenewed, and
/// opens a fenced transaction that checks its fence in time, then stalls
/// as `stall` says until `commit` is sent, and then increments the
/// counter. Returns the fence, the lock's key and the transaction's task.
async fn stalled_fenced_holder(
    server: &PostgresServer,
    backend: PostgresBackend,
    name: &'static str,
    stall: Stall,
    commit: tokio::sync::oneshot::Receiver<()>,
) -> (
    Fence,
    String,
    tokio::task::JoinHandle<distlock_core::Result<()>>,
) {
    let mut sql = counter_table(server).await;
    let guard = backend.lock(name).await.expect("lock");
    let fence = Fence::of(&guard);
    let key = guard.key().to_owned();
    guard.abandon();
    let (checked_tx, checked_rx) = tokio::sync::oneshot::channel::<()>();
    let in_tx = fence.clone();
    let task = tokio::spawn(async move {
        backend
            .fenced_transaction(&mut sql, &in_tx, move |tx| {
                Box::pin(async move {
                    let _ = checked_tx.send(());
                    tokio::pin!(commit);
                    match stall {
                        Stall::Busy => loop {
                            tokio::select! {
                                _ = &mut commit => break,
                                () = tokio::time::sleep(TTL / 4) => {
                                    tx.execute("SELECT 1", &[]).await?;
                                }
                            }
                        },
                        Stall::Paused => {
                            let _ = commit.await;
                        }
                    }
                    tx.execute("UPDATE counter SET n = n + 1 WHERE id = 1", &[])
                        .await?;
                    Ok(())
                })
            })
            .await
    });
    tokio::time::timeout(SLACK, checked_rx)
        .await
        .expect("the holder checks its fence in time")
        .expect("the holder's check");
    (fence, key, task)
}

fn as_i64(fence: &Fence) -> i64 {
    i64::try_from(fence.token().get()).unwrap()
}

/// A fenced transaction that checked its fence in time keeps the lock
/// until it commits, even when its lease runs out meanwhile (it is still
/// busy, so the server does not end it) and another entry of the key
/// leaves the queue (a waiter that gives up, a permit released), which
/// hands the key over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hand_over_never_passes_an_open_fenced_transaction() {
    let server = start_postgres().await;
    let sql = sql_client(&server).await;
    let (commit_tx, commit_rx) = tokio::sync::oneshot::channel();
    let (fence, key, fenced) = stalled_fenced_holder(
        &server,
        client(&server).await,
        "races/fenced",
        Stall::Busy,
        commit_rx,
    )
    .await;
    let next = idle_waiter(&sql, &key, "next in line").await;
    let leaving = idle_waiter(&sql, &key, "gives up").await;
    until_expired(&sql, as_i64(&fence)).await;

    // The last waiter gives up: its release hands the key over.
    let was_live: bool = tokio::time::timeout(
        SLACK,
        sql.query_one("SELECT distlock.release($1::text::uuid)", &[&leaving]),
    )
    .await
    .expect("the release does not wait for the fenced transaction")
    .expect("release")
    .get(0);
    assert!(!was_live, "the leaving waiter held nothing");
    assert!(
        !granted(&sql, &next).await,
        "the next waiter was granted while the fenced transaction of token {} was open",
        fence.token()
    );

    let _ = commit_tx.send(());
    tokio::time::timeout(SLACK, fenced)
        .await
        .expect("the fenced transaction ends")
        .expect("task")
        .expect("it checked in time, so it commits");
    // The next look at the queue removes the expired grant and lets the
    // next waiter in, with a higher token.
    let late = client(&server).await;
    let err = late.try_lock("races/fenced").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert!(granted(&sql, &next).await, "the next waiter was not let in");
    let token: i64 = sql
        .query_one(
            "SELECT token FROM distlock.entries WHERE owner = $1::text::uuid",
            &[&next],
        )
        .await
        .unwrap()
        .get(0);
    assert!(token > as_i64(&fence));
}

/// A holder paused inside a fenced transaction past its lease blocks its
/// own lock until the server ends its transaction, and nothing else:
/// waiters for that lock do not stall the connections that renew the
/// backend's other locks, and the server ends the idle transaction, so
/// the lock moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_fenced_holder_costs_no_other_lock() {
    let server = start_postgres().await;
    let sql = sql_client(&server).await;
    let shared = PostgresBackend::connect(config_for(&server).with_pool_size(2))
        .await
        .expect("connect");
    let other = shared.lock("races/other").await.expect("lock");
    let (resume, paused) = tokio::sync::oneshot::channel();
    let (fence, _, fenced) = stalled_fenced_holder(
        &server,
        client(&server).await,
        "races/paused",
        Stall::Paused,
        paused,
    )
    .await;
    let waiters: Vec<tokio::task::JoinHandle<distlock_core::Result<distlock_core::FencingToken>>> =
        (0..3)
            .map(|_| {
                let backend = shared.clone();
                tokio::spawn(async move {
                    let guard = backend.lock("races/paused").await?;
                    let token = guard.token();
                    guard.release().await?;
                    distlock_core::Result::Ok(token)
                })
            })
            .collect();

    // Several TTLs go by: the other lock keeps being renewed.
    let lost = tokio::time::timeout(TTL * 4, other.lost()).await;
    assert!(
        lost.is_err() && other.is_held(),
        "the other lock was lost ({lost:?}) while waiters queued behind a paused fenced holder"
    );
    // The server ended the idle transaction, so the lock moved on.
    for waiter in waiters {
        let token = tokio::time::timeout(SLACK, waiter)
            .await
            .expect("each waiter gets in")
            .expect("task")
            .expect("lock and release");
        assert!(token > fence.token());
    }
    // The holder resumes: its write is refused.
    let _ = resume.send(());
    let ended = tokio::time::timeout(SLACK, fenced)
        .await
        .expect("the resumed transaction ends")
        .expect("task");
    assert!(ended.is_err(), "the paused holder's transaction committed");
    let count: i64 = sql
        .query_one("SELECT n FROM counter WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0, "the paused holder's write committed");
    other.release().await.expect("release");
}
