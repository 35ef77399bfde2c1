//! Semaphores and read-write locks on the file backend, across processes:
//! every helper process is this test binary run again (see
//! `support/helper_process.rs`), sharing the lock directory with the test.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::{
    Access, AcquireOptions, ErrorKind, FencingToken, LockBackend, LockBackendExt, LockGuard,
    Primitive, Wait,
};
use distlock_file::FileBackend;
use distlock_testkit::assert::{fails_with, joined, token_after, within};

#[path = "support/helper_process.rs"]
mod helper_process;
mod support;

use helper_process::{HELPER_ENV, Helper};

/// Permits of the semaphores under test.
const LIMIT: u32 = 3;
/// The TTL of every client here: short, so a killed holder frees its
/// permit quickly.
const TTL: Duration = Duration::from_secs(1);
/// How long a step between processes may take before it counts as a hang.
const STEP: Duration = Duration::from_secs(15);

fn permit(limit: u32) -> Access {
    Access::permit(limit).expect("a non-zero limit")
}

fn waiting() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::Timeout(Duration::from_secs(60)))
}

fn once() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::No)
}

async fn client(dir: &Path) -> FileBackend {
    support::client(dir, Some(TTL)).await
}

/// The access written as the helpers take it: `read`, `write`, `permit:N`.
fn parse_access(text: &str) -> Access {
    match text {
        "read" => Access::Read,
        "write" => Access::Write,
        other => permit(
            other
                .strip_prefix("permit:")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad access {other:?}")),
        ),
    }
}

/// Not a test of its own: the body of the helper processes the tests below
/// start. Without [`HELPER_ENV`] it does nothing.
#[test]
fn helper_process() {
    let Ok(task) = std::env::var(HELPER_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let words: Vec<&str> = task.split(' ').collect();
    runtime.block_on(async {
        match words.as_slice() {
            ["permits", dir, tasks, rounds] => {
                take_permits(
                    dir.as_ref(),
                    tasks.parse().unwrap(),
                    rounds.parse().unwrap(),
                )
                .await
            }
            ["hold", dir, access, name] => hold(dir.as_ref(), parse_access(access), name).await,
            other => panic!("unknown helper task {other:?}"),
        }
    });
}

/// Helper task `permits <dir> <tasks> <rounds>`: `tasks` clients of this
/// process each take a permit of the semaphore `pool` `rounds` times. A
/// holder puts a marker file in `<dir>/inside` while it holds its permit
/// and counts the markers there; the process prints the most it counted.
/// Until some holder has counted all `LIMIT`, holders stay inside, counting
/// again (so full use is shown, not left to timing).
async fn take_permits(dir: &Path, tasks: usize, rounds: usize) {
    let inside = dir.join("inside");
    let full = dir.join("full");
    std::fs::create_dir_all(&inside).unwrap();
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for task in 0..tasks {
        let backend = client(dir).await;
        let (inside, full, most) = (inside.clone(), full.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let marker = inside.join(format!("{}-{task}", std::process::id()));
            let count = || {
                let now = std::fs::read_dir(&inside).unwrap().count();
                most.fetch_max(now, Ordering::SeqCst);
                if now >= LIMIT as usize {
                    std::fs::write(&full, b"").unwrap();
                }
            };
            for _ in 0..rounds {
                let guard = backend
                    .acquire_as(&name("pool"), permit(LIMIT), &waiting())
                    .await
                    .expect("a permit");
                std::fs::write(&marker, b"").unwrap();
                within(STEP, "all permits in use at once", async {
                    count();
                    while !full.exists() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        count();
                    }
                })
                .await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                std::fs::remove_file(&marker).unwrap();
                guard.release().await.expect("release");
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    // libtest has already printed "test helper_process ... " on this line.
    println!("\nmost {}", most.load(Ordering::SeqCst));
}

/// Helper task `hold <dir> <access> <name>`: tries `access` of `name` once
/// (printing `busy` if it would block), then waits for it and prints
/// `granted TOKEN`, or `refused MESSAGE`; holds it until a line arrives
/// on stdin, releases it and prints `released`.
async fn hold(dir: &Path, access: Access, lock: &str) {
    let backend = client(dir).await;
    let lock = name(lock);
    let tried = backend.acquire_as(&lock, access, &once()).await;
    let granted = match tried {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            println!("\nbusy");
            backend.acquire_as(&lock, access, &waiting()).await
        }
        other => other,
    };
    let guard = match granted {
        Ok(guard) => guard,
        Err(e) => {
            println!("\nrefused {e}");
            return;
        }
    };
    println!("\ngranted {}", guard.token().0);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    guard.release().await.expect("release");
    println!("\nreleased");
}

fn name(text: &str) -> distlock_core::LockName {
    distlock_core::LockName::new(text).unwrap()
}

/// Starts a `hold` helper and returns it once it printed `first`
/// (`granted` or `busy`), with the rest of that line.
async fn holder(dir: &Path, access: &str, lock: &str, first: &str) -> (Helper, String) {
    let mut helper = Helper::start(&format!("hold {} {access} {lock}", dir.display()));
    let rest = helper.line_after(first, STEP).await;
    (helper, rest)
}

/// The token a `hold` helper printed after `granted `.
async fn granted(helper: &mut Helper) -> FencingToken {
    FencingToken(helper.value_after("granted ", STEP).await)
}

/// Six clients, each its own `FileBackend` as a process would have, take
/// permits of a 3-permit semaphore over and over: never more than 3 are
/// inside at once, and all 3 permits are in use at once (every holder of
/// the first round waits inside until 3 are).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn six_clients_fill_a_three_permit_semaphore_and_never_exceed_it() {
    let dir = tempfile::tempdir().unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let backend = client(dir.path()).await;
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let guard = backend
                    .acquire_as(&name("pool"), permit(LIMIT), &waiting())
                    .await
                    .expect("a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= LIMIT as usize, "{now} holders of {LIMIT} permits");
                within(STEP, "all permits in use at once", async {
                    while most.load(Ordering::SeqCst) < LIMIT as usize {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
                .await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        joined(Duration::from_secs(60), "six permit takers", task).await;
    }
    assert_eq!(most.load(Ordering::SeqCst), LIMIT as usize);
}

/// Three processes with two clients each take permits of a 3-permit
/// semaphore: the markers the holders leave while inside never number
/// more than 3, and reach 3.
#[tokio::test]
async fn a_semaphore_never_exceeds_its_limit_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let helpers: Vec<_> = (0..3)
        .map(|_| Helper::start(&format!("permits {} 2 6", dir.path().display())))
        .collect();
    let mut most: Vec<usize> = Vec::new();
    for mut helper in helpers {
        most.push(helper.value_after("most ", Duration::from_secs(60)).await);
        helper.stop().await;
    }
    eprintln!("most holders each process saw inside: {most:?}");
    assert!(
        most.iter().all(|&m| m <= LIMIT as usize),
        "more than {LIMIT} inside: {most:?}"
    );
    assert_eq!(most.iter().max(), Some(&(LIMIT as usize)), "never full");
}

/// A writer waiting in another process goes before a reader that arrives
/// after it (from a third process): the reader is refused while the writer
/// waits, and is granted after the writer, with a higher token.
#[tokio::test]
async fn a_queued_writer_goes_before_later_readers_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (first, other) = (client(dir.path()).await, client(dir.path()).await);
    let reading = first
        .acquire_as(&name("doc"), Access::Read, &once())
        .await
        .expect("the first reader");
    let (mut writer, _) = holder(dir.path(), "write", "doc", "busy").await;
    // The writer is queued once a new reader is refused.
    within(STEP, "the writer to queue", async {
        loop {
            match other.acquire_as(&name("doc"), Access::Read, &once()).await {
                Ok(reader) => reader.release().await.expect("release"),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => panic!("a reader's try: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (mut late_reader, _) = holder(dir.path(), "read", "doc", "busy").await;
    let first_token = reading.token();
    reading.release().await.expect("release");
    let write_token = granted(&mut writer).await;
    token_after(first_token, write_token);
    let err = other.acquire_as(&name("doc"), Access::Read, &once()).await;
    fails_with(ErrorKind::WouldBlock, "a reader beside the writer", err);
    writer.send("release").await;
    writer.expect_line("released", STEP).await;
    let read_token = granted(&mut late_reader).await;
    token_after(write_token, read_token);
    late_reader.send("release").await;
    late_reader.expect_line("released", STEP).await;
}

/// A permit asked for with another limit than the one a holder in another
/// process uses is `InvalidConfig` naming both limits, and takes nothing:
/// the second of the 2 permits is still free.
#[tokio::test]
async fn a_permit_with_another_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut other, _) = holder(dir.path(), "permit:2", "limits", "granted ").await;
    let backend = client(dir.path()).await;
    let err = backend
        .acquire_as(&name("limits"), permit(5), &waiting())
        .await;
    let message = fails_with(ErrorKind::InvalidConfig, "a disagreeing limit", err).to_string();
    assert!(
        message.contains("limit of 2") && message.contains("not 5"),
        "names both limits: {message}"
    );
    let second: LockGuard = backend
        .acquire_as(&name("limits"), permit(2), &once())
        .await
        .expect("the second of 2 permits");
    second.release().await.expect("release");
    other.send("release").await;
    other.expect_line("released", STEP).await;
}

/// A permit holder whose process is killed frees its permit when its
/// lease runs out: a waiter on the full semaphore gets it, with a higher
/// token.
#[tokio::test]
async fn a_killed_holder_frees_its_permit_at_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let (helper, token) = holder(dir.path(), "permit:1", "one", "granted ").await;
    let killed = FencingToken(token.parse().unwrap());
    helper.stop().await;
    let backend = client(dir.path()).await;
    let next = within(
        TTL * 3 + STEP,
        "the killed holder's permit",
        backend.acquire_as(&name("one"), permit(1), &waiting()),
    )
    .await
    .expect("the permit");
    token_after(killed, next.token());
    next.release().await.expect("release");
}

/// `list` shows semaphores and read-write locks in use, each with its
/// oldest grant's token and its waiters, apart from the lock of the same
/// name.
#[tokio::test]
async fn list_shows_semaphores_and_read_write_locks_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (client(dir.path()).await, client(dir.path()).await);
    let first = a
        .acquire_as(&name("in-use/x"), permit(2), &once())
        .await
        .expect("a permit");
    let second = b
        .acquire_as(&name("in-use/x"), permit(2), &once())
        .await
        .expect("a permit");
    let reader = a
        .acquire_as(&name("in-use/x"), Access::Read, &once())
        .await
        .expect("a reader");
    let listed = a.list_all("in-use/").await.expect("list");
    let seen: Vec<_> = listed
        .iter()
        .map(|l| (l.primitive, l.name.as_str(), l.holder_token, l.waiting))
        .collect();
    assert_eq!(
        seen,
        vec![
            (Primitive::Semaphore, "in-use/x", Some(first.token()), 0),
            (Primitive::RwLock, "in-use/x", Some(reader.token()), 0),
        ],
        "the lock in-use/x is not in use"
    );
    for guard in [first, second, reader] {
        guard.release().await.expect("release");
    }
    assert!(a.list_all("in-use/").await.expect("list").is_empty());
}
