//! The workload client: one OS process per client, connecting with the
//! backend crates directly from a URL, looping acquire → write (begin) →
//! hold → write (end) → release, and reporting lost signals and errors.
//! Contending on many names, it acquires several names in name order
//! (so that clients cannot deadlock), holds them together, writes under
//! each, and gives them back.
//!
//! A section the runner keeps open through a fault writes every few
//! milliseconds, each write after `is_held()` said yes, as the docs tell
//! holders to; it stops writing once the guard says no. It writes the end
//! of its section whatever its guard says, as a client that does not check
//! would: the checking resource then shows what that costs with and
//! without fencing.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::memory::MemoryBackend;
use distlock_core::{AcquireOptions, DynLockBackend, Error, LockName, LostReason, Result, Wait};

use super::history::{Op, Outcome, Recorder};
use super::mutant::{Held, Mutant};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Mutex;

use super::clock::now_ns;
use super::contended::Contended;
use super::own_ends::OwnEnds;
use super::protocol::{Message, Phase, Reply, Section};

/// How often an extended section checks whether it may end, and writes
/// while its guard says it is held.
const KEEP_EVERY: Duration = Duration::from_millis(4);

/// How long a guard's lost signal is watched after the grant.
const WATCH_LIMIT: Duration = Duration::from_secs(30);

/// What one client does.
#[derive(Debug, Clone)]
pub struct ClientArgs {
    /// The checking resource.
    pub resource: SocketAddr,
    /// The backend URL (through this client's own fault proxies).
    pub url: String,
    /// The client's number in the cell.
    pub client: u32,
    /// The lock all clients contend for (many names: their prefix).
    pub lock: String,
    /// Which primitive of that name.
    pub contended: Contended,
    /// How long to stay inside the critical section.
    pub hold: Duration,
    /// How long one acquisition may wait.
    pub wait: Duration,
    /// The promise the backend is made to break, if any.
    pub mutant: Option<Mutant>,
    /// The origin of the history's times ([`now_ns`]), shared by every
    /// client of a trial.
    pub origin_ns: u64,
}

/// How often the history recorded so far is sent.
const HISTORY_EVERY: Duration = Duration::from_millis(25);

/// The client's history, shared by its loop and its watchers.
#[derive(Debug, Clone)]
struct Log(Arc<std::sync::Mutex<Recorder>>);

impl Log {
    fn note(&self, op: Op, outcome: Outcome, token: Option<u64>, name: &str) {
        let at_ns = now_ns();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(op, outcome, token, at_ns, name);
    }

    /// The events not yet sent, and the moment (relative to the origin)
    /// up to which they are complete.
    fn take(&self) -> (Vec<super::history::Event>, u64) {
        let mut recorder = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let until_ns = recorder.since_origin(now_ns());
        (recorder.take(), until_ns)
    }

    /// Sends the history in batches on `events` until the resource goes,
    /// each with the `ends` captured meanwhile.
    fn send_on(&self, events: Arc<Mutex<Channel>>, client: u32, ends: OwnEnds) {
        let log = self.clone();
        tokio::spawn(async move {
            // Sent even when empty: the runner cuts every client's history
            // at the earliest moment all of them are complete.
            loop {
                tokio::time::sleep(HISTORY_EVERY).await;
                let (batch, until_ns) = log.take();
                let message = Message::History {
                    client,
                    events: batch,
                    until_ns,
                    ends: ends.take(),
                };
                if events.lock().await.send(&message).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Connects to the backend a URL names: `etcd://`, `redis://`,
/// `redis+cluster://`, `redlock://`, `zk://`, `postgres://`, `mysql://`,
/// `file://`, or `memory://`, which is a lock local
/// to each process and so excludes nobody across processes: the broken
/// target the detector must catch.
///
/// # Cancel safety
///
/// Cancel safe: a cancelled connect leaves only closed connections.
pub async fn connect(url: &str) -> Result<Arc<DynLockBackend>> {
    let scheme = url.split("://").next().unwrap_or_default();
    Ok(match scheme {
        "etcd" => Arc::new(
            distlock_etcd::EtcdBackend::connect(distlock_etcd::EtcdConfig::from_url(url)?).await?,
        ),
        "redis" => Arc::new(distlock_redis::RedisBackend::connect_url(url).await?),
        "redis+cluster" => Arc::new(distlock_redis::RedisClusterBackend::connect_url(url).await?),
        "redlock" => Arc::new(distlock_redis::RedlockBackend::connect_url(url).await?),
        "zk" => {
            Arc::new(distlock_zk::ZkBackend::connect(distlock_zk::ZkConfig::from_url(url)?).await?)
        }
        "postgres" => Arc::new(distlock_postgres::PostgresBackend::connect_url(url).await?),
        "mysql" => Arc::new(distlock_mysql::MysqlBackend::connect_url(url).await?),
        "file" => Arc::new(
            distlock_file::FileBackend::connect(distlock_file::FileConfig::from_url(url)?).await?,
        ),
        "memory" => Arc::new(MemoryBackend::new()),
        other => {
            return Err(Error::invalid_config(format!(
                "fault-matrix client: unknown scheme {other:?}; known: etcd, redis, \
                 redis+cluster, redlock, zk, postgres, mysql, file, memory"
            )));
        }
    })
}

/// One request/reply connection to the checking resource.
#[derive(Debug)]
struct Channel {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Channel {
    async fn open(addr: SocketAddr, client: u32) -> io::Result<Self> {
        let (read, write) = TcpStream::connect(addr).await?.into_split();
        let mut channel = Channel {
            lines: BufReader::new(read).lines(),
            write,
        };
        channel
            .send(&Message::Hello {
                client,
                pid: std::process::id(),
            })
            .await?;
        Ok(channel)
    }

    async fn send(&mut self, message: &Message) -> io::Result<Reply> {
        let mut text = serde_json::to_string(message).map_err(io::Error::other)?;
        text.push('\n');
        self.write.write_all(text.as_bytes()).await?;
        let line = self
            .lines
            .next_line()
            .await?
            .ok_or_else(|| io::Error::other("the checking resource closed the connection"))?;
        serde_json::from_str(&line).map_err(io::Error::other)
    }
}

/// Runs the loop until the process is killed; returns only when the
/// checking resource goes away.
///
/// # Cancel safety
///
/// Cancelling drops the current guard, which releases in the background.
pub async fn run(args: ClientArgs) -> io::Result<()> {
    // First: `SIGUSR1`'s default action ends the process, and the runner
    // may send it to a client still connecting on a loaded machine.
    let extend = extend_on_signals()?;
    let ends = OwnEnds::install();
    let mut writes = Channel::open(args.resource, args.client).await?;
    let events = Arc::new(Mutex::new(Channel::open(args.resource, args.client).await?));
    let backend = loop {
        match connect(&args.url).await {
            Ok(backend) => break backend,
            Err(e) => {
                report_error(&mut writes, args.client, "connect", &e).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let options = AcquireOptions::new().wait(Wait::Timeout(args.wait));
    let log = Log(Arc::new(std::sync::Mutex::new(Recorder::new(
        args.client,
        args.origin_ns,
    ))));
    log.send_on(Arc::clone(&events), args.client, ends);
    let mut draw = StdRng::seed_from_u64(args.origin_ns ^ u64::from(args.client));
    for seq in 0.. {
        let names = args.contended.names_to_hold(&args.lock, &mut draw);
        let mut holds: Vec<(String, Held)> = Vec::new();
        for name in names {
            let watch = (&events, &log);
            match acquire(&args, &*backend, &name, &options, watch, &mut writes).await? {
                Some(held) => holds.push((name, held)),
                None => break,
            }
        }
        let complete = holds.len() == args.contended.held_at_once();
        let mut sections = Vec::new();
        for (name, held) in &holds {
            sections.push(Section {
                client: args.client,
                token: held.token(),
                seq,
                granted_ns: held.granted_ns,
                key: held.key().to_owned(),
                name: name.clone(),
            });
        }
        if complete {
            for ((_, held), section) in holds.iter().zip(&sections) {
                write_checked(&mut writes, section, Phase::Begin, held, &log).await?;
            }
            tokio::time::sleep(args.hold).await;
            let mut writing = vec![true; holds.len()];
            while extend.load(Ordering::Relaxed) {
                for (((_, held), section), writing) in holds.iter().zip(&sections).zip(&mut writing)
                {
                    if *writing {
                        *writing =
                            write_checked(&mut writes, section, Phase::Keep, held, &log).await?;
                    }
                }
                tokio::time::sleep(KEEP_EVERY).await;
            }
            for ((_, held), section) in holds.iter().zip(&sections) {
                write_checked(&mut writes, section, Phase::End, held, &log).await?;
            }
        }
        // Given back in reverse order of acquisition; a set acquired only
        // in part is given back unused.
        for ((name, held), section) in holds.into_iter().zip(sections).rev() {
            let token = Some(section.token);
            log.note(Op::Release, Outcome::Invoke, token, &name);
            match held.release().await {
                Ok(()) => log.note(Op::Release, Outcome::Ok, token, &name),
                Err(e) => {
                    log.note(Op::Release, Outcome::Fail, token, &name);
                    report_error(&mut writes, args.client, "release", &e).await?;
                }
            }
        }
        if !complete {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Acquires `name`, recording the attempt, and watches the grant's lost
/// signal from then on (reported on `watch`'s events connection and in
/// its history); `None` when it failed (the failure is reported).
///
/// # Cancel safety
///
/// Cancelling drops a guard being acquired, which releases in the
/// background.
async fn acquire(
    args: &ClientArgs,
    backend: &DynLockBackend,
    name: &str,
    options: &AcquireOptions,
    (events, log): (&Arc<Mutex<Channel>>, &Log),
    writes: &mut Channel,
) -> io::Result<Option<Held>> {
    let lock = LockName::new(name).map_err(io::Error::other)?;
    log.note(Op::Acquire, Outcome::Invoke, None, name);
    match Held::acquire(args.contended, backend, &lock, options, args.mutant).await {
        Ok(held) => {
            log.note(Op::Acquire, Outcome::Ok, Some(held.token()), name);
            watch_lost(&held, name, args.client, events, log);
            Ok(Some(held))
        }
        Err(e) => {
            // A timed-out or failed acquisition may still have taken
            // effect on the server: its outcome is unknown.
            log.note(Op::Acquire, Outcome::Info, None, name);
            report_error(writes, args.client, "acquire", &e).await?;
            Ok(None)
        }
    }
}

/// Watches `held`'s lost signal and reports it. Detached: a loss can fire
/// after a release that failed. Bounded, so that guards whose signal
/// never fires leave no task behind.
fn watch_lost(held: &Held, name: &str, client: u32, events: &Arc<Mutex<Channel>>, log: &Log) {
    let lost = held.lost();
    let token = held.token();
    let events = Arc::clone(events);
    let log = log.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let Ok(reason) = tokio::time::timeout(WATCH_LIMIT, lost).await else {
            return;
        };
        let at_ns = now_ns();
        if reason != LostReason::Released {
            log.note(Op::Lost, Outcome::Info, Some(token), &name);
            let message = Message::Lost {
                client,
                token,
                at_ns,
                reason: reason.to_string(),
                name,
            };
            let _ = events.lock().await.send(&message).await;
        }
    });
}

/// Asks the guard, then writes `phase` (a keep write only if it said
/// held); returns what it said.
async fn write_checked(
    channel: &mut Channel,
    section: &Section,
    phase: Phase,
    held: &Held,
    log: &Log,
) -> io::Result<bool> {
    let checked_ns = now_ns();
    let is_held = held.is_held();
    if is_held || phase != Phase::Keep {
        // The history holds the writes the client made believing it held
        // the lock; an unchecked end write is the resource's business.
        let token = Some(section.token);
        if is_held {
            log.note(Op::Write, Outcome::Invoke, token, &section.name);
        }
        let reply = channel
            .send(&section.write(phase, is_held, checked_ns))
            .await?;
        let outcome = match reply {
            Reply::Ok => Outcome::Ok,
            Reply::Stale => Outcome::Fail,
        };
        if is_held {
            log.note(Op::Write, outcome, token, &section.name);
        }
    }
    Ok(is_held)
}

/// `SIGUSR1` makes the current (or next) critical section last until
/// `SIGUSR2`: the runner uses it to keep a holder inside its section
/// through a fault, as a holder doing long work would be.
fn extend_on_signals() -> io::Result<Arc<AtomicBool>> {
    let extend = Arc::new(AtomicBool::new(false));
    let mut start = signal(SignalKind::user_defined1())?;
    let mut stop = signal(SignalKind::user_defined2())?;
    let flag = Arc::clone(&extend);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = start.recv() => flag.store(true, Ordering::Relaxed),
                _ = stop.recv() => flag.store(false, Ordering::Relaxed),
            }
        }
    });
    Ok(extend)
}

async fn report_error(channel: &mut Channel, client: u32, op: &str, e: &Error) -> io::Result<()> {
    channel
        .send(&Message::Error {
            client,
            op: op.to_owned(),
            kind: e.kind().as_str().to_owned(),
            at_ns: now_ns(),
        })
        .await
        .map(drop)
}
