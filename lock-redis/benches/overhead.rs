//! Uncontended overhead: one client's `lock` + `release` of a free lock
//! against the raw round trips of the same requests, issued with the
//! `redis` crate directly, on the same real Redis in the same run.
//!
//! Our acquire of a free lock is one `EVALSHA` of the acquire script and our
//! release one `EVALSHA` of the release script, over a `ConnectionManager`.
//! The raw loop sends exactly those: it records one of our cycles in the
//! server's slow log (every command logged, with its arguments), checks
//! that the cycle called those two scripts, and replays them over its own
//! `ConnectionManager` with a fresh random owner id per cycle, as ours
//! draws one per acquisition.
//!
//! Run: `cargo bench -p distlock-redis --bench overhead` (`BENCH_ROUNDS`,
//! default 8, alternating rounds; `BENCH_SECS`, default 1, seconds per
//! side per round).

use async_trait::async_trait;
use distlock_redis::{DEFAULT_REQUEST_TIMEOUT, RedisBackend, RedisConfig};
use distlock_testkit::overhead::{Cycle, Ours, Rounds, compare, print};
use distlock_testkit::servers::RedisServer;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

const NAME: &str = "overhead";

/// One `SLOWLOG GET` entry: id, time, duration, arguments, client, name.
type LogEntry = (i64, i64, i64, Vec<String>, redis::Value, redis::Value);

/// The commands of one of our cycles, as the server's slow log shows
/// them, oldest first (this server also logs the commands run inside
/// scripts).
async fn record_cycle(server: &RedisServer, ours: &mut Ours<RedisBackend>) -> Vec<Vec<String>> {
    let mut conn = redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut run = async |args: &[&str]| {
        redis::cmd(args[0])
            .arg(&args[1..])
            .query_async::<redis::Value>(&mut conn)
            .await
            .expect("slowlog command")
    };
    run(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]).await;
    run(&["SLOWLOG", "RESET"]).await;
    ours.acquire().await.expect("acquire");
    ours.release().await.expect("release");
    let log = run(&["SLOWLOG", "GET", "100"]).await;
    run(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]).await;
    let entries: Vec<LogEntry> = redis::from_redis_value(log).expect("slow log entries");
    // Newest first; leave out our own slow-log commands.
    entries
        .into_iter()
        .rev()
        .map(|entry| entry.3)
        .filter(|args| !["SLOWLOG", "CONFIG"].contains(&args[0].to_uppercase().as_str()))
        .collect()
}

fn is_script_call(args: &[String]) -> bool {
    ["EVALSHA", "EVAL"].contains(&args[0].to_uppercase().as_str())
}

/// A recorded `EVALSHA`, replayed with another owner id.
struct Script {
    args: Vec<String>,
    /// The owner id it was recorded with.
    owner: String,
}

impl Script {
    /// `EVALSHA sha numkeys keys... args...`: the owner id is the first arg.
    fn new(args: Vec<String>) -> Script {
        assert!(args[0].eq_ignore_ascii_case("EVALSHA"), "{args:?}");
        assert!(
            args.iter().all(|a| !a.contains("more bytes")),
            "truncated by the slow log: {args:?}"
        );
        let keys: usize = args[2].parse().expect("numkeys");
        let owner = args[3 + keys].clone();
        Script { args, owner }
    }

    fn with_owner(&self, owner: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        for arg in &self.args[1..] {
            cmd.arg(arg.replace(&self.owner, owner));
        }
        cmd
    }
}

/// Our two scripts, replayed.
struct Raw {
    conn: ConnectionManager,
    acquire: Script,
    release: Script,
    owner: String,
}

#[async_trait]
impl Cycle for Raw {
    async fn acquire(&mut self) -> Result<(), String> {
        self.owner = format!("{:032x}", rand::random::<u128>());
        let reply: Vec<i64> = self
            .acquire
            .with_owner(&self.owner)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        match reply[..] {
            [1, _token] => Ok(()),
            _ => Err(format!("not acquired: {reply:?}")),
        }
    }

    async fn release(&mut self) -> Result<(), String> {
        let freed: i64 = self
            .release
            .with_owner(&self.owner)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        match freed {
            1 => Ok(()),
            _ => Err("not ours any more".to_owned()),
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = Rounds::from_env();
    let server = RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    let config = RedisConfig::new("127.0.0.1", server.port());
    let backend = RedisBackend::connect(config).await.expect("connect");
    let mut ours = Ours::new(backend, NAME);
    let recorded = record_cycle(&server, &mut ours).await;
    let inside = recorded.iter().filter(|args| !is_script_call(args)).count();
    let calls: Vec<Vec<String>> = recorded.into_iter().filter(|a| is_script_call(a)).collect();
    let names: Vec<String> = calls.iter().map(|args| args[0].clone()).collect();
    assert_eq!(
        names.len(),
        2,
        "one uncontended cycle called {calls:?}, not the two scripts"
    );
    let mut calls = calls.into_iter();
    let acquire = Script::new(calls.next().expect("acquire"));
    let release = Script::new(calls.next().expect("release"));
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(DEFAULT_REQUEST_TIMEOUT))
        .set_response_timeout(Some(DEFAULT_REQUEST_TIMEOUT));
    let client = redis::Client::open(server.url()).expect("client");
    let mut raw = Raw {
        conn: ConnectionManager::new_with_config(client, manager)
            .await
            .expect("connect"),
        acquire,
        release,
        owner: String::new(),
    };
    println!(
        "# distlock-redis: uncontended lock + release against the raw scripts\n\n\
         redis at {}; 1 client, hold 0, {} alternating rounds of {:?} per side\n\n\
         one of our cycles sent: {} ({inside} commands ran inside them)\n\
         - acquire: {}\n- release: {}\n",
        server.addr(),
        rounds.rounds,
        rounds.each,
        names.join(", "),
        raw.acquire.args[2..].join(" "),
        raw.release.args[2..].join(" "),
    );
    let (o, r) = compare(&mut ours, &mut raw, rounds).await;
    print(
        [
            "distlock redis (lock + release)",
            "raw redis (2 EVALSHA, same scripts)",
        ],
        [&o, &r],
    );
}
