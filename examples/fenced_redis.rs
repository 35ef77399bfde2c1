//! Fencing a Redis key that is not the lock's: workers take a lock (from
//! any backend), claim a fence with their token, read a counter and write
//! it back through a compare-and-set script. One worker is made stale: it
//! stops renewing (as a paused process does) until its lease has run out
//! and a newer holder has written; its late write must be refused.
//!
//! ```text
//! DISTLOCK_URL=etcd://127.0.0.1:2379 REDIS_URL=redis://127.0.0.1:6379 \
//!     cargo run --features full --example fenced_redis
//! ```
//!
//! `DISTLOCK_URL` picks the lock backend (default `memory://`, any works);
//! `REDIS_URL` the Redis that holds the counter (default
//! `redis://127.0.0.1:6379`). Exits 0 when every stale write was refused and
//! the counter equals the number of accepted increments, 1 otherwise, 2 on
//! an error.
//!
//! See `docs/fencing.md` for the rule (equal tokens pass, lower ones are
//! refused) and the claim-before-read step.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::fence::{self, RedisFenceReply, Stale, TokenScope};
use distlock::redis::redis;
use distlock::{AcquireOptions, Backend, Config, FencingToken, LockBackend, LockName};
use redis::aio::MultiplexedConnection;
use tokio::sync::{oneshot, watch};

/// Workers that take turns, and the increments each makes.
const WORKERS: u64 = 3;
const INCREMENTS: u64 = 4;
/// The lease of the stale worker: short, so the others soon take over.
const STALE_TTL: Duration = Duration::from_secs(1);
/// The bound on each Redis command and on waiting for the lock.
const REQUEST: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(60);

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Runs `work` within [`REQUEST`], naming `what` if it does not finish.
async fn bounded<T, E: Into<Failure>>(
    what: &str,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(REQUEST, work).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => Err(format!("{what}: no reply within {REQUEST:?}").into()),
    }
}

/// The counter in Redis and its fence, one hash tag for a Redis Cluster.
struct Resource {
    conn: MultiplexedConnection,
    script: redis::Script,
    fence_key: String,
    data_key: String,
    scope: TokenScope,
}

impl Resource {
    /// Raises the fence to `token` before anything is read: from here on a
    /// write with a lower token is refused.
    async fn claim(&self, token: FencingToken) -> Result<RedisFenceReply, Failure> {
        let [scope, token_arg, _] = fence::redis_fenced_set_args(&self.scope, token, "");
        let mut call = self.script.key(&self.fence_key);
        call.arg(scope).arg(token_arg);
        self.reply(token, call).await
    }

    async fn read(&self) -> Result<u64, Failure> {
        let mut conn = self.conn.clone();
        let value: Option<u64> = bounded("GET", async {
            redis::cmd("GET")
                .arg(&self.data_key)
                .query_async(&mut conn)
                .await
        })
        .await?;
        Ok(value.unwrap_or(0))
    }

    async fn write(&self, token: FencingToken, value: u64) -> Result<RedisFenceReply, Failure> {
        let args = fence::redis_fenced_set_args(&self.scope, token, value.to_string());
        let mut call = self.script.key(&self.fence_key);
        call.key(&self.data_key).arg(&args[..]);
        self.reply(token, call).await
    }

    async fn reply(
        &self,
        token: FencingToken,
        call: redis::ScriptInvocation<'_>,
    ) -> Result<RedisFenceReply, Failure> {
        let mut conn = self.conn.clone();
        let raw: (i64, String) = bounded("the fence script", call.invoke_async(&mut conn)).await?;
        fence::redis_fence_reply(&self.scope, token, raw)
            .ok_or_else(|| "unexpected reply from the fence script".into())
    }
}

/// What the workers saw.
#[derive(Default)]
struct Tally {
    accepted: AtomicU64,
    stale_refused: AtomicU64,
    stale_accepted: AtomicU64,
}

/// One increment under the lock: claim, read, write. Returns the token.
async fn increment(
    backend: &Backend,
    name: &LockName,
    resource: &Resource,
) -> Result<u64, Failure> {
    let options = AcquireOptions::new().wait(distlock::Wait::Timeout(WAIT));
    let guard = backend.acquire(name, &options).await?;
    let token = guard.token();
    let claimed = resource.claim(token).await?;
    let written = match claimed {
        RedisFenceReply::Written => {
            let value = resource.read().await?;
            resource.write(token, value + 1).await?
        }
        refused => refused,
    };
    guard.release().await?;
    match written {
        RedisFenceReply::Written => Ok(token.get()),
        RedisFenceReply::Refused(why) => Err(format!("a live holder was refused: {why}").into()),
    }
}

/// Takes the lock, claims and reads, then stops renewing (the pause): says
/// so on `paused`, and waits until a newer holder has written before
/// writing its stale value.
async fn stale_worker(
    backend: Backend,
    name: LockName,
    resource: Arc<Resource>,
    mut newest: watch::Receiver<u64>,
    tally: Arc<Tally>,
    paused: oneshot::Sender<()>,
) -> Result<(), Failure> {
    let ttl = STALE_TTL.max(backend.capabilities().min_ttl);
    let guard = backend
        .acquire(&name, &AcquireOptions::new().ttl(ttl))
        .await?;
    let token = guard.token();
    if resource.claim(token).await? != RedisFenceReply::Written {
        return Err("the first holder's claim was refused".into());
    }
    let value = resource.read().await?;
    println!("stale worker: token {token}, read {value}, now pausing past its lease");
    // No more renewals, as in a paused process: the lease runs out.
    guard.abandon();
    let _ = paused.send(());
    let overtaken = tokio::time::timeout(WAIT, newest.wait_for(|t| *t > token.get()))
        .await
        .is_ok_and(|changed| changed.is_ok());
    if !overtaken {
        return Err("no newer holder wrote while the stale worker was paused".into());
    }
    match resource.write(token, value + 1).await? {
        RedisFenceReply::Written => {
            println!("stale worker: late write with token {token} ACCEPTED");
            tally.stale_accepted.fetch_add(1, Ordering::SeqCst);
        }
        RedisFenceReply::Refused(why @ Stale::Superseded { .. }) => {
            println!("stale worker: late write refused: {why}");
            tally.stale_refused.fetch_add(1, Ordering::SeqCst);
        }
        RedisFenceReply::Refused(why) => return Err(why.into()),
    }
    Ok(())
}

/// A worker making [`INCREMENTS`] increments, announcing each token on `newest`.
async fn worker(
    backend: Backend,
    name: LockName,
    resource: Arc<Resource>,
    tally: Arc<Tally>,
    newest: Arc<watch::Sender<u64>>,
) -> Result<(), Failure> {
    for _ in 0..INCREMENTS {
        let token = increment(&backend, &name, &resource).await?;
        tally.accepted.fetch_add(1, Ordering::SeqCst);
        newest.send_modify(|t| *t = (*t).max(token));
    }
    Ok(())
}

/// Runs the workers; true when the fence did its job.
async fn run() -> Result<bool, Failure> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let backend = distlock::connect_with(&config).await?;
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let client = redis::Client::open(redis_url.as_str())?;
    let conn = bounded(
        "connecting to REDIS_URL",
        client.get_multiplexed_async_connection(),
    )
    .await?;
    // A fresh fence per run: tokens of different lock services do not compare.
    let run = format!("{}-{:x}", std::process::id(), rand_suffix());
    let resource = Arc::new(Resource {
        conn,
        script: fence::redis_fenced_set(),
        fence_key: format!("fenced_redis:{{{run}}}:fence"),
        data_key: format!("fenced_redis:{{{run}}}:counter"),
        scope: backend.token_scope(),
    });
    let name = LockName::new(format!("examples/fenced-redis/{run}"))?;
    println!(
        "lock backend {} ({}), counter {} in {}",
        backend.capabilities().backend,
        backend.description(),
        resource.data_key,
        distlock::redact_url(&redis_url)
    );

    let tally = Arc::new(Tally::default());
    let (newest_tx, newest_rx) = watch::channel(0u64);
    let newest_tx = Arc::new(newest_tx);
    // The stale worker goes first, so the others queue behind its lease.
    let (paused_tx, paused_rx) = oneshot::channel();
    let stale = tokio::spawn(stale_worker(
        backend.clone(),
        name.clone(),
        resource.clone(),
        newest_rx,
        tally.clone(),
        paused_tx,
    ));
    // An error of the stale worker drops `paused_tx`; it is reported below.
    let _ = tokio::time::timeout(WAIT, paused_rx).await;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            tokio::spawn(worker(
                backend.clone(),
                name.clone(),
                resource.clone(),
                tally.clone(),
                newest_tx.clone(),
            ))
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    stale.await??;

    let counter = resource.read().await?;
    let accepted = tally.accepted.load(Ordering::SeqCst);
    let refused = tally.stale_refused.load(Ordering::SeqCst);
    let stale_accepted = tally.stale_accepted.load(Ordering::SeqCst);
    println!(
        "counter {counter}, accepted increments {accepted}, stale writes refused {refused}, \
         stale writes accepted {stale_accepted}"
    );
    Ok(stale_accepted == 0 && refused == 1 && counter == accepted)
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

#[tokio::main]
async fn main() {
    match run().await {
        Ok(true) => println!("fencing held: every stale write was refused"),
        Ok(false) => {
            eprintln!("fencing FAILED");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
