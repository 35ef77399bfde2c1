//! The Redis wait queue and the lock scripts, checked on a real server:
//! exact wake-ups, clean-up after cancellation, skipping dead waiters,
//! clock-seeded tokens and renewal that never re-creates a lost key.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt, LockGuard};
use distlock_redis::RedisBackend;
use distlock_testkit::assert::within;
use distlock_testkit::servers::{RedisServer, RespReply};

const QUEUE: &str = "distlock:lock:{queue/test}:queue";
const WAITERS: &str = "distlock:lock:{queue/test}:waiters";
const NAME: &str = "queue/test";

/// A client with a long TTL, so no timer-driven refresh muddles the counts.
async fn patient_client(server: &RedisServer) -> RedisBackend {
    RedisBackend::connect(support::config_for(server).with_default_ttl(Duration::from_secs(30)))
        .await
        .expect("connect")
}

async fn integer(server: &RedisServer, args: &[&str]) -> i64 {
    match server.command(args).await.expect("command") {
        RespReply::Integer(n) => n,
        other => panic!("{args:?} answered {other:?}"),
    }
}

/// The guard the spawned `lock` task `waiting` gets within `seconds`;
/// `what` names the wait.
async fn granted(
    waiting: tokio::task::JoinHandle<distlock_core::Result<LockGuard>>,
    seconds: u64,
    what: &str,
) -> LockGuard {
    within(Duration::from_secs(seconds), what, waiting)
        .await
        .expect("waiter task alive")
        .expect("lock")
}

/// Polls until `LLEN queue` is `n`.
async fn queue_length_becomes(server: &RedisServer, n: i64) {
    within(Duration::from_secs(5), "queue length", async {
        while integer(server, &["LLEN", QUEUE]).await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// With four waiters queued, a release hands the lock to exactly the first
/// one: one script in all (the release itself), no herd.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_wakes_only_the_next_waiter() {
    let server = support::start_redis().await;
    let holder = patient_client(&server).await;
    let held = holder.lock(NAME).await.expect("lock");
    let mut waiters = Vec::new();
    for i in 0..4 {
        let client = patient_client(&server).await;
        waiters.push(tokio::spawn(async move {
            let guard = client.lock(NAME).await.expect("lock");
            (i, guard, client)
        }));
        queue_length_becomes(&server, i + 1).await;
    }
    server
        .command(&["CONFIG", "RESETSTAT"])
        .await
        .expect("RESETSTAT");
    held.release().await.expect("release");
    let first = waiters.remove(0);
    let (i, guard, _client) = within(Duration::from_secs(5), "first waiter", first)
        .await
        .unwrap();
    assert_eq!(i, 0, "the first waiter in the queue goes first");
    assert_eq!(integer(&server, &["LLEN", QUEUE]).await, 3);
    assert_eq!(
        server.command_calls("evalsha").await.expect("INFO"),
        1,
        "the release hands the lock over; no waiter may have run a script"
    );
    guard.release().await.expect("release");
    for (expected, waiter) in (1..).zip(waiters) {
        let (i, guard, _client) = within(Duration::from_secs(5), "next waiter", waiter)
            .await
            .unwrap();
        assert_eq!(i, expected, "FIFO order");
        guard.release().await.expect("release");
    }
}

/// A waiter whose `lock()` future is dropped leaves the queue at once (not
/// after its TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_leaves_the_queue() {
    let server = support::start_redis().await;
    let holder = support::client(&server).await;
    let waiter = patient_client(&server).await;
    let held = holder.lock(NAME).await.expect("lock");
    let attempt = tokio::time::timeout(Duration::from_millis(200), waiter.lock(NAME)).await;
    assert!(attempt.is_err(), "must still be waiting");
    queue_length_becomes(&server, 0).await;
    assert_eq!(integer(&server, &["ZCARD", WAITERS]).await, 0);
    held.release().await.expect("release");
}

/// A waiter that died without cleaning up (its entry is in the queue, but
/// nobody refreshes it) is skipped once its entry expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiter_is_skipped_after_its_entry_expires() {
    let server = support::start_redis().await;
    let holder = support::client(&server).await;
    let live = support::client(&server).await;
    let held = holder.lock(NAME).await.expect("lock");
    // A waiter of a crashed process: queued first, entry valid for 500 ms.
    let time = server.command(&["TIME"]).await.expect("TIME").to_string();
    let seconds: u64 = time.lines().next().unwrap().parse().unwrap();
    let expiry = (seconds * 1000 + 1500).to_string();
    integer(&server, &["RPUSH", QUEUE, "deadbeef/0"]).await;
    integer(&server, &["ZADD", WAITERS, &expiry, "deadbeef/0"]).await;
    let waiting = tokio::spawn(async move { live.lock(NAME).await });
    queue_length_becomes(&server, 2).await;
    held.release().await.expect("release");
    let guard = granted(waiting, 5, "live waiter after the dead one expired").await;
    assert_eq!(integer(&server, &["LLEN", QUEUE]).await, 0);
    guard.release().await.expect("release");
}

/// The first token of a lock is the server clock in microseconds (plus
/// one): so after Redis loses the counter, tokens go on from "now".
#[tokio::test]
async fn first_token_is_seeded_from_the_server_clock() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let micros = |reply: RespReply| {
        let text = reply.to_string();
        let mut parts = text.lines();
        let s: u64 = parts.next().unwrap().parse().unwrap();
        let us: u64 = parts.next().unwrap().parse().unwrap();
        s * 1_000_000 + us
    };
    let before = micros(server.command(&["TIME"]).await.unwrap());
    let guard = client.lock(NAME).await.expect("lock");
    let after = micros(server.command(&["TIME"]).await.unwrap());
    let token = guard.token().get();
    assert!(
        before < token && token <= after + 1,
        "token {token} not within server time [{before}, {after}]"
    );
    guard.release().await.expect("release");
    let next = client.lock(NAME).await.expect("lock");
    assert_eq!(next.token().get(), token + 1);
    next.release().await.expect("release");
}

/// Renewing a lock whose key was deleted fails with `LeaseLost`, fires the
/// lost signal, and does not re-create the key.
#[tokio::test]
async fn renewal_never_recreates_a_deleted_key() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let guard = client.lock(NAME).await.expect("lock");
    assert_eq!(integer(&server, &["DEL", guard.key()]).await, 1);
    let err = guard.renew().await.expect_err("key is gone");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(!err.is_retryable());
    assert!(guard.lost_signal().is_lost());
    assert!(!guard.is_held());
    assert_eq!(integer(&server, &["EXISTS", guard.key()]).await, 0);
    let err = guard.release().await.expect_err("not held");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
}

/// A lock held by another owner is never deleted by a release with our
/// owner id, even when the key name matches.
#[tokio::test]
async fn release_of_someone_elses_key_touches_nothing() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let guard = client.lock(NAME).await.expect("lock");
    let key = guard.key().to_owned();
    // Someone else's lock now sits under the same key.
    server
        .command(&["SET", &key, "someone-else", "PX", "60000"])
        .await
        .expect("SET");
    let err = guard.release().await.expect_err("not ours");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    let value = server.command(&["GET", &key]).await.expect("GET");
    assert_eq!(value, RespReply::Bulk(Some("someone-else".into())));
}

/// A waiter on its own current-thread runtime (its own OS thread), which a
/// test can freeze as a whole: a GC pause or a descheduled process.
struct FreezableWaiter {
    commands: tokio::sync::mpsc::UnboundedSender<Command>,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum Command {
    Lock(
        &'static str,
        tokio::sync::oneshot::Sender<distlock_core::Result<distlock_core::LockGuard>>,
    ),
    Freeze(
        Duration,
        tokio::sync::oneshot::Sender<()>,
        tokio::sync::oneshot::Sender<()>,
    ),
}

impl FreezableWaiter {
    /// Connects a backend with `config` on a new thread's runtime.
    async fn start(config: distlock_redis::RedisConfig) -> Self {
        let (commands, mut inbox) = tokio::sync::mpsc::unbounded_channel::<Command>();
        let (ready, connected) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let client = RedisBackend::connect(config).await.expect("connect");
                let _ = ready.send(());
                while let Some(command) = inbox.recv().await {
                    match command {
                        Command::Lock(name, reply) => {
                            let client = client.clone();
                            tokio::spawn(async move {
                                let _ = reply.send(client.lock(name).await);
                            });
                        }
                        Command::Freeze(pause, frozen, thawed) => {
                            let _ = frozen.send(());
                            // Blocks the whole runtime: no task of this
                            // client runs, no socket of it is read.
                            std::thread::sleep(pause);
                            let _ = thawed.send(());
                        }
                    }
                }
            });
        });
        within(Duration::from_secs(5), "frozen client connects", connected)
            .await
            .expect("client thread died");
        FreezableWaiter {
            commands,
            thread: Some(thread),
        }
    }

    /// Starts `lock(name)` on the waiter's runtime.
    fn lock(
        &self,
        name: &'static str,
    ) -> tokio::sync::oneshot::Receiver<distlock_core::Result<distlock_core::LockGuard>> {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.commands
            .send(Command::Lock(name, reply))
            .expect("client thread alive");
        result
    }

    /// Freezes the runtime for `pause`; returns once it is frozen, with a
    /// receiver that resolves when it thaws.
    async fn freeze(&self, pause: Duration) -> tokio::sync::oneshot::Receiver<()> {
        let (frozen_tx, frozen) = tokio::sync::oneshot::channel();
        let (thawed_tx, thawed) = tokio::sync::oneshot::channel();
        self.commands
            .send(Command::Freeze(pause, frozen_tx, thawed_tx))
            .expect("client thread alive");
        within(Duration::from_secs(5), "freeze", frozen)
            .await
            .expect("client thread alive");
        thawed
    }
}

impl Drop for FreezableWaiter {
    fn drop(&mut self) {
        let (closed, _) = tokio::sync::mpsc::unbounded_channel();
        self.commands = closed;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A waiter that is frozen past its TTL right when the lock is handed over
/// to it wakes up to a stale hand-over message: the lock it was given has
/// expired and another client holds it with a higher token. It must not
/// take that message as a grant, neither before nor after its next script
/// has re-queued it; it gets the lock (with a higher token) when the
/// current holder releases. 10 rounds of a 1 s freeze with a 300 ms TTL
/// (about 15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_waiter_never_takes_a_stale_hand_over() {
    const ROUNDS: usize = 10;
    const FREEZE: Duration = Duration::from_secs(1);
    let ttl = Duration::from_millis(300);
    let server = support::start_redis().await;
    let config = support::config_for(&server).with_default_ttl(ttl);
    let holder = RedisBackend::connect(config.clone())
        .await
        .expect("connect");
    let taker = RedisBackend::connect(config.clone())
        .await
        .expect("connect");
    let frozen = FreezableWaiter::start(config).await;
    let mut last = 0;
    let mut rising = |round: usize, who: &str, token: u64| {
        assert!(
            token > last,
            "round {round}: {who} got token {token}, not above {last}"
        );
        last = token;
    };
    for round in 0..ROUNDS {
        let first = holder.lock(NAME).await.expect("lock");
        rising(round, "the first holder", first.token().get());
        let mut waiting = frozen.lock(NAME);
        queue_length_becomes(&server, 1).await;
        let thawed = frozen.freeze(FREEZE).await;
        // Hands the lock over to the frozen waiter, whose lease then runs out.
        first.release().await.expect("release");
        let second = within(
            Duration::from_secs(3),
            "takeover after the frozen waiter's lease",
            taker.lock(NAME),
        )
        .await
        .expect("lock");
        rising(round, "the taker", second.token().get());
        within(Duration::from_secs(3), "thaw", thawed)
            .await
            .expect("client thread alive");
        // Thawed, the waiter sees the stale message and its timer at once.
        if let Ok(result) = tokio::time::timeout(ttl, &mut waiting).await {
            let guard = result.expect("waiter alive");
            match guard {
                Ok(guard) => panic!(
                    "round {round}: the thawed waiter returned a guard with token {} (is_held {}) while token {} is held (is_held {})",
                    guard.token(),
                    guard.is_held(),
                    second.token(),
                    second.is_held()
                ),
                Err(e) => panic!("round {round}: the thawed waiter failed: {e}"),
            }
        }
        assert!(second.is_held(), "round {round}: the taker lost the lock");
        second.release().await.expect("release");
        let third = within(
            Duration::from_secs(3),
            "hand-over after the release",
            waiting,
        )
        .await
        .expect("waiter alive")
        .expect("lock");
        assert!(third.is_held(), "round {round}");
        rising(round, "the thawed waiter", third.token().get());
        third.release().await.expect("release");
    }
    assert_eq!(integer(&server, &["LLEN", QUEUE]).await, 0);
    assert_eq!(integer(&server, &["ZCARD", WAITERS]).await, 0);
}

/// `total_connections_received` of `INFO stats`, over one kept connection.
async fn connections_received(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .expect("INFO stats");
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .map(|n| n.trim().parse().expect("a number"))
        .expect("total_connections_received in INFO stats")
}

/// A waiter keeps its connections while it waits: in 5 s (two and a half
/// pub/sub ping periods) neither it nor the holder opens a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waiter_opens_no_new_connections() {
    let server = support::start_redis().await;
    let holder = patient_client(&server).await;
    let waiter = patient_client(&server).await;
    let held = holder.lock(NAME).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock(NAME).await });
    queue_length_becomes(&server, 1).await;
    let mut stats = redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let before = connections_received(&mut stats).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = connections_received(&mut stats).await;
    assert_eq!(
        after - before,
        0,
        "{} new connections in 5 s while one client held and one waited",
        after - before
    );
    held.release().await.expect("release");
    let guard = granted(waiting, 5, "hand-over").await;
    guard.release().await.expect("release");
}
