//! Fencing a Postgres row: workers take a lock (from any backend) and, in
//! one transaction each, claim the row with their token, read it and write
//! it. One worker is made stale: it stops renewing (as a paused process
//! does) until its lease has run out and a newer holder has written; its
//! late transaction must be refused by the claim.
//!
//! ```text
//! DISTLOCK_URL=etcd://127.0.0.1:2379 \
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run --example fenced_postgres
//! ```
//!
//! `DISTLOCK_URL` picks the lock backend (default `memory://`); the table
//! lives in `DATABASE_URL` (required). Exits 0 when the stale write was
//! refused and the counter equals the number of accepted increments, 1
//! otherwise, 2 on an error. It creates a table of its own per run and
//! drops it at the end.
//!
//! The SQL comes from `distlock::fence::SqlFence`; `docs/fencing.md` explains
//! the claim-before-read rule it follows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::fence::{SqlFence, TokenScope, sql_token};
use distlock::{AcquireOptions, Backend, Config, FencingToken, LockBackend, LockName};
use tokio::sync::{Mutex, oneshot, watch};
use tokio_postgres::{Client, NoTls};

const WORKERS: u64 = 3;
const INCREMENTS: u64 = 4;
/// The lease of the stale worker: short, so the others soon take over.
const STALE_TTL: Duration = Duration::from_secs(1);
/// The bound on each statement, and on waiting for the lock.
const REQUEST: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(60);
/// The one row the workers count in.
const ROW: &str = "counter";

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

/// The table and a connection to it (one transaction at a time).
struct Table {
    client: Mutex<Client>,
    fence: SqlFence,
    name: String,
    scope: TokenScope,
}

impl Table {
    /// One transaction: claim the row with `token`, read the counter,
    /// write `counter + 1` if `write`. `None` when the claim was refused
    /// (a newer holder claimed the row); else the counter read.
    async fn claim_read_write(
        &self,
        token: FencingToken,
        write: bool,
    ) -> Result<Option<i64>, Failure> {
        let token = sql_token(token)?;
        let mut client = self.client.lock().await;
        let tx = bounded("BEGIN", client.transaction()).await?;
        let claimed = bounded(
            "the claim",
            tx.query_opt(&self.fence.claim(), &[&ROW, &token, &self.scope.as_str()]),
        )
        .await?;
        let Some(row) = claimed else {
            bounded("ROLLBACK", tx.rollback()).await?;
            return Ok(None);
        };
        let value: i64 = row.try_get("value")?;
        if write {
            let update = format!("UPDATE {} SET value = $2 WHERE id = $1", self.name);
            bounded("the write", tx.execute(&update, &[&ROW, &(value + 1)])).await?;
        }
        bounded("COMMIT", tx.commit()).await?;
        Ok(Some(value))
    }

    async fn counter(&self) -> Result<i64, Failure> {
        let client = self.client.lock().await;
        let select = format!("SELECT value FROM {} WHERE id = $1", self.name);
        let row = bounded("reading the counter", client.query_one(&select, &[&ROW])).await?;
        Ok(row.try_get("value")?)
    }
}

#[derive(Default)]
struct Tally {
    accepted: AtomicU64,
    stale_refused: AtomicU64,
    stale_accepted: AtomicU64,
}

/// Takes the lock, claims and reads (committed), then stops renewing (the
/// pause): says so on `paused`, waits until a newer holder has written, and
/// tries its write, claiming again with its old token.
async fn stale_worker(
    backend: Backend,
    name: LockName,
    table: Arc<Table>,
    mut newest: watch::Receiver<u64>,
    tally: Arc<Tally>,
    paused: oneshot::Sender<()>,
) -> Result<(), Failure> {
    let ttl = STALE_TTL.max(backend.capabilities().min_ttl);
    let guard = backend
        .acquire(&name, &AcquireOptions::new().ttl(ttl))
        .await?;
    let token = guard.token();
    let read = table.claim_read_write(token, false).await?;
    println!("stale worker: token {token}, read {read:?}, now pausing past its lease");
    guard.abandon();
    let _ = paused.send(());
    let overtaken = tokio::time::timeout(WAIT, newest.wait_for(|t| *t > token.get()))
        .await
        .is_ok_and(|changed| changed.is_ok());
    if !overtaken {
        return Err("no newer holder wrote while the stale worker was paused".into());
    }
    match table.claim_read_write(token, true).await? {
        None => {
            println!("stale worker: late transaction with token {token} refused by the claim");
            tally.stale_refused.fetch_add(1, Ordering::SeqCst);
        }
        Some(_) => {
            println!("stale worker: late write with token {token} ACCEPTED");
            tally.stale_accepted.fetch_add(1, Ordering::SeqCst);
        }
    }
    Ok(())
}

async fn worker(
    backend: Backend,
    name: LockName,
    table: Arc<Table>,
    tally: Arc<Tally>,
    newest: Arc<watch::Sender<u64>>,
) -> Result<(), Failure> {
    let options = AcquireOptions::new().wait(distlock::Wait::Timeout(WAIT));
    for _ in 0..INCREMENTS {
        let guard = backend.acquire(&name, &options).await?;
        let token = guard.token();
        let written = table.claim_read_write(token, true).await?;
        guard.release().await?;
        if written.is_none() {
            return Err(format!("a live holder (token {token}) was refused").into());
        }
        tally.accepted.fetch_add(1, Ordering::SeqCst);
        newest.send_modify(|t| *t = (*t).max(token.get()));
    }
    Ok(())
}

async fn run() -> Result<bool, Failure> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let backend = distlock::connect_with(&config).await?;
    let database = std::env::var("DATABASE_URL")
        .map_err(|_| "set DATABASE_URL to the Postgres to write to")?;
    let (client, connection) = bounded(
        "connecting to DATABASE_URL",
        tokio_postgres::connect(&database, NoTls),
    )
    .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    let run = format!("{}_{}", std::process::id(), rand_suffix());
    let name = format!("fenced_counter_{run}");
    let fence = SqlFence::new(&name)?;
    let create = format!("CREATE TABLE {name} (id TEXT PRIMARY KEY, value BIGINT NOT NULL)");
    bounded("CREATE TABLE", client.batch_execute(&create)).await?;
    bounded(
        "adding the fence columns",
        client.batch_execute(&fence.add_columns()),
    )
    .await?;
    let insert = format!("INSERT INTO {name} (id, value) VALUES ($1, 0)");
    bounded("INSERT", client.execute(&insert, &[&ROW])).await?;
    let table = Arc::new(Table {
        client: Mutex::new(client),
        fence,
        name: name.clone(),
        scope: backend.token_scope(),
    });
    println!(
        "lock backend {} ({}), counter in table {name}",
        backend.capabilities().backend,
        backend.description()
    );

    let lock = LockName::new(format!("examples/fenced-postgres/{run}"))?;
    let tally = Arc::new(Tally::default());
    let (newest_tx, newest_rx) = watch::channel(0u64);
    let newest_tx = Arc::new(newest_tx);
    let (paused_tx, paused_rx) = oneshot::channel();
    let stale = tokio::spawn(stale_worker(
        backend.clone(),
        lock.clone(),
        table.clone(),
        newest_rx,
        tally.clone(),
        paused_tx,
    ));
    let _ = tokio::time::timeout(WAIT, paused_rx).await;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            tokio::spawn(worker(
                backend.clone(),
                lock.clone(),
                table.clone(),
                tally.clone(),
                newest_tx.clone(),
            ))
        })
        .collect();
    let mut outcome = Ok(());
    for worker in workers {
        if let Err(e) = worker.await.map_err(Failure::from).and_then(|r| r) {
            outcome = Err(e);
        }
    }
    if let Err(e) = stale.await.map_err(Failure::from).and_then(|r| r) {
        outcome = Err(e);
    }
    let counter = table.counter().await;
    let drop_table = format!("DROP TABLE {name}");
    let dropped = bounded("DROP TABLE", async {
        table.client.lock().await.batch_execute(&drop_table).await
    })
    .await;
    outcome?;
    dropped?;
    let counter = u64::try_from(counter?)?;
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
    RandomState::new().hash_one(std::time::SystemTime::now()) % 1_000_000
}

#[tokio::main]
async fn main() {
    match run().await {
        Ok(true) => println!("fencing held: the stale write was refused"),
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
