//! File-backend specifics the conformance suite does not cover: tokens that
//! survive a restart of every client, bad directories, cancelled attempts.

use std::time::Duration;

use tokio::time::Instant;

use distlock_core::{ErrorKind, LockBackend, LockBackendExt};
use distlock_file::{FileBackend, FileConfig};

#[path = "support/helper_process.rs"]
mod helper_process;
mod support;

async fn backend(dir: &std::path::Path) -> FileBackend {
    support::client(dir, None).await
}

#[tokio::test]
async fn tokens_keep_increasing_after_every_client_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let a = backend(dir.path()).await;
        let guard = a.lock("restart").await.unwrap();
        let token = guard.token();
        guard.release().await.unwrap();
        token
    };
    let b = backend(dir.path()).await;
    let guard = b.lock("restart").await.unwrap();
    assert!(guard.token() > first, "{} after {first}", guard.token());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn unwritable_directory_is_a_typed_error() {
    let err = FileBackend::connect(FileConfig::new("/proc/distlock-cannot-exist"))
        .await
        .expect_err("cannot create a directory in /proc");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Backend | ErrorKind::Unauthorized | ErrorKind::Unavailable
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("/proc/distlock-cannot-exist"),
        "{err}"
    );
}

#[tokio::test]
async fn relative_directory_is_invalid_config() {
    let err = FileBackend::connect(FileConfig::new("relative/dir"))
        .await
        .expect_err("relative");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

#[tokio::test]
async fn try_lock_reports_would_block_naming_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (backend(dir.path()).await, backend(dir.path()).await);
    let held = a.lock("jobs/x").await.unwrap();
    let err = b.try_lock("jobs/x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert!(err.to_string().contains("jobs/x"), "{err}");
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_attempts_never_leave_the_lock_taken() {
    let dir = tempfile::tempdir().unwrap();
    let a = backend(dir.path()).await;
    // Cancel acquisitions at every stage of an attempt, including while the
    // blocking write is in flight; none may leave the lock held.
    for i in 0..50u64 {
        let cancel_after = Duration::from_micros(i * 40);
        let _ = tokio::time::timeout(cancel_after, a.lock("cancel")).await;
    }
    let b = backend(dir.path()).await;
    let guard = tokio::time::timeout(Duration::from_secs(5), b.lock("cancel"))
        .await
        .expect("a cancelled attempt left the lock taken")
        .expect("lock");
    guard.release().await.unwrap();
}

/// The helper processes of these tests: holding a record's OS lock, and
/// contending for a lock.
mod helper {
    use std::path::Path;
    use std::time::Duration;

    pub(crate) use crate::helper_process::{HELPER_ENV, Helper};

    /// Starts a helper that holds the OS lock on `path` until stopped.
    pub(crate) async fn flock(path: &Path) -> Helper {
        let mut helper = Helper::start(&format!("flock {}", path.display()));
        helper.expect_line("held", Duration::from_secs(10)).await;
        helper
    }

    /// What a helper process does, by task.
    pub(crate) fn run(task: &str) {
        let (verb, arg) = task.split_once(' ').unwrap_or((task, ""));
        match verb {
            "flock" => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(arg)
                    .expect("open the lock file");
                file.lock().expect("flock");
                // libtest has already printed "test helper_process ... " on this line.
                println!("\nheld");
                // Hold the OS lock until killed (or stdin closes).
                let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
            }
            "contend" => super::contend(arg),
            other => panic!("unknown helper task {other:?}"),
        }
    }
}

/// Helper task `contend <dir> <tasks> <millis> <hold_us>`: after "go" on
/// stdin, `tasks` tasks of this process take the lock "fair", hold it for
/// `hold_us` µs, release it and rest twice as long, in a loop for `millis`
/// ms; then it prints how often it got the lock.
fn contend(args: &str) {
    let mut args = args.split(' ');
    let mut next = || {
        args.next()
            .expect("contend <dir> <tasks> <millis> <hold_us>")
    };
    let dir = std::path::PathBuf::from(next());
    let tasks: usize = next().parse().unwrap();
    let run_for = Duration::from_millis(next().parse().unwrap());
    let hold = Duration::from_micros(next().parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config =
            quick_config(&dir, Duration::from_secs(2), Duration::from_secs(5)).with_fsync(false);
        let backend = FileBackend::connect(config).await.unwrap();
        println!("\nready");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
        let end = Instant::now() + run_for;
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let workers: Vec<_> = (0..tasks)
            .map(|_| {
                let (backend, count) = (backend.clone(), count.clone());
                tokio::spawn(async move {
                    while let Ok(Ok(guard)) =
                        tokio::time::timeout_at(end, backend.lock("fair")).await
                    {
                        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        // The work done under the lock.
                        tokio::time::sleep(hold).await;
                        guard.release().await.unwrap();
                        // The work done between acquisitions.
                        tokio::time::sleep(hold * 2).await;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.await.unwrap();
        }
        println!(
            "\ncount {}",
            count.load(std::sync::atomic::Ordering::Relaxed)
        );
    });
}

/// Not a test of its own: the body of the helper processes the tests below
/// start. Without [`helper::HELPER_ENV`] it does nothing.
#[test]
fn helper_process() {
    if let Ok(task) = std::env::var(helper::HELPER_ENV) {
        helper::run(&task);
    }
}

/// Short TTL and request timeout; no `fsync`, so that a busy disk does not
/// slow the operations these tests time.
fn quick_config(dir: &std::path::Path, ttl: Duration, request: Duration) -> FileConfig {
    FileConfig::new(dir)
        .with_default_ttl(ttl)
        .with_request_timeout(request)
        .with_fsync(false)
}

/// A process stopped (or hung) while it holds the OS lock of a record, as a
/// process stopped inside a transaction would: every operation on that lock
/// gives up within its own bound with an error that says why, no attempt
/// stays stuck in the OS lock, and everything recovers once it is gone.
#[test]
fn a_process_stuck_inside_a_transaction_delays_no_one_past_their_bounds() {
    // One blocking thread: an attempt left stuck in `flock` would starve
    // every later file operation of this process.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        const TTL: Duration = Duration::from_millis(300);
        const REQUEST: Duration = Duration::from_millis(800);
        const SLACK: Duration = Duration::from_millis(300);
        let dir = tempfile::tempdir().unwrap();
        let config = quick_config(dir.path(), TTL, REQUEST);
        let a = FileBackend::connect(config.clone()).await.unwrap();
        let b = FileBackend::connect(config).await.unwrap();
        let holder = a.lock("stuck").await.unwrap();
        let helper = helper::flock(&dir.path().join("locks/stuck.lock")).await;
        let stuck_since = Instant::now();

        // The holder cannot renew, and learns it lost the lock within its TTL.
        tokio::time::timeout(TTL + SLACK, holder.lost())
            .await
            .expect("the holder never learned that it cannot renew");
        assert!(!holder.is_held());

        // A waiter gives up at its own deadline, saying why.
        let t = Instant::now();
        let err = b
            .lock_timeout("stuck", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(
            t.elapsed() < Duration::from_millis(200) + SLACK,
            "a 200 ms wait took {:?}: {err}",
            t.elapsed()
        );
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert!(err.to_string().contains("another process"), "{err}");

        // try_lock gives up within the request timeout, naming the file.
        let t = Instant::now();
        let err = b.try_lock("stuck").await.unwrap_err();
        assert!(
            t.elapsed() < REQUEST + SLACK,
            "try_lock took {:?}",
            t.elapsed()
        );
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert!(err.to_string().contains("stuck.lock"), "{err}");

        // A cancelled attempt leaves no thread behind in the OS lock: the only
        // blocking thread is free at once for another lock.
        let _ = tokio::time::timeout(Duration::from_millis(50), b.lock("stuck")).await;
        let other = tokio::time::timeout(Duration::from_secs(1), b.lock("other"))
            .await
            .expect("a file operation on another lock was stuck behind the OS lock")
            .unwrap();
        other.release().await.unwrap();

        // Hold the OS lock for at least 3×TTL in all (here always longer),
        // then let it go.
        tokio::time::sleep_until(stuck_since + 3 * TTL).await;
        helper.stop().await;
        let next = tokio::time::timeout(Duration::from_secs(2), b.lock("stuck"))
            .await
            .expect("the lock did not recover after the stuck process left")
            .unwrap();
        assert!(next.token() > holder.token());
        next.release().await.unwrap();
        let _ = holder.release().await;
    });
}

/// A waiter already queued behind a holder when a process gets stuck
/// holding the OS lock still gives up at the end of its own wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_gives_up_within_its_wait_while_the_os_lock_is_stuck() {
    const WAIT: Duration = Duration::from_millis(600);
    const SLACK: Duration = Duration::from_millis(300);
    let dir = tempfile::tempdir().unwrap();
    let config = quick_config(dir.path(), Duration::from_secs(2), Duration::from_secs(2));
    let a = FileBackend::connect(config.clone()).await.unwrap();
    let b = FileBackend::connect(config).await.unwrap();
    let holder = a.lock("queued").await.unwrap();
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        let result = b.lock_timeout("queued", WAIT).await;
        (result.map(|g| g.token()), start.elapsed())
    });
    // Let the waiter take its place in the queue, then get stuck.
    let queue = dir.path().join("locks/queued.queue");
    tokio::time::timeout(Duration::from_secs(2), async {
        while !queue.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the waiter never queued");
    let helper = helper::flock(&dir.path().join("locks/queued.lock")).await;
    let (result, waited) = waiter.await.unwrap();
    let err = result.expect_err("the lock was held throughout");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        waited < WAIT + SLACK,
        "a {WAIT:?} wait took {waited:?}: {err}"
    );
    helper.stop().await;
    holder.release().await.unwrap();
}

/// The wall clock stepped back a day after the last renewal, so the deadline
/// on disk now lies a day ahead: the lock still frees within its TTL.
#[tokio::test]
async fn a_wall_clock_step_backward_does_not_lengthen_a_lease() {
    const TTL: Duration = Duration::from_millis(300);
    const SLACK: Duration = Duration::from_millis(700);
    let dir = tempfile::tempdir().unwrap();
    let config = quick_config(dir.path(), TTL, Duration::from_secs(2));
    let a = FileBackend::connect(config.clone()).await.unwrap();
    let b = FileBackend::connect(config).await.unwrap();
    let guard = a.lock("stepped").await.unwrap();
    let token = guard.token();
    // Stop renewing, as a holder that crashed right after a renewal.
    let last_renewal = Instant::now();
    guard.abandon();
    {
        let os_lock = std::fs::File::open(dir.path().join("locks/stepped.lock")).unwrap();
        os_lock.lock().unwrap();
        let path = dir.path().join("locks/stepped.rec");
        let mut record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let deadline = record["deadline_ms"]
            .as_u64()
            .expect("a wall-clock deadline");
        record["deadline_ms"] = (deadline + 86_400_000).into();
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    }
    let next = tokio::time::timeout(TTL + SLACK, b.lock("stepped"))
        .await
        .expect("the lease outlived its TTL by the clock step")
        .unwrap();
    assert!(last_renewal.elapsed() <= TTL + SLACK);
    assert!(next.token() > token);
    next.release().await.unwrap();
}

/// Names that differ only in case are separate locks.
#[tokio::test]
async fn names_differing_only_in_case_are_independent_locks() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (backend(dir.path()).await, backend(dir.path()).await);
    let upper = a.try_lock("Job").await.unwrap();
    let lower = b
        .try_lock("job")
        .await
        .expect("job must not be blocked by Job");
    assert!(upper.is_held() && lower.is_held());
    upper.release().await.unwrap();
    lower.release().await.unwrap();
}

/// Waiters in other processes get their turn: one process with three tasks
/// and one with a single task contend for one lock, each task taking it,
/// working 1 ms, releasing and resting 2 ms. A release wakes the waiters of
/// its own process at once; the lone waiter elsewhere must still get about
/// its share (a quarter of the acquisitions), not a few percent.
#[tokio::test]
async fn waiters_in_other_processes_are_not_starved() {
    const TASKS: [u64; 2] = [3, 1];
    let dir = tempfile::tempdir().unwrap();
    let mut helpers: Vec<_> = TASKS
        .iter()
        .map(|tasks| {
            helper::Helper::start(&format!(
                "contend {} {tasks} 2000 1000",
                dir.path().display()
            ))
        })
        .collect();
    for helper in &mut helpers {
        helper.expect_line("ready", Duration::from_secs(10)).await;
    }
    for helper in &mut helpers {
        helper.send("go").await;
    }
    let mut counts = Vec::new();
    for helper in &mut helpers {
        let count: u64 = helper.value_after("count ", Duration::from_secs(10)).await;
        counts.push(count);
    }
    let total: u64 = counts.iter().sum();
    eprintln!("acquisitions per process: {counts:?} for {TASKS:?} tasks");
    assert!(total >= 20, "too few acquisitions to judge: {counts:?}");
    // Each process should get at least 40 % of its tasks' share.
    let all_tasks: u64 = TASKS.iter().sum();
    for (count, tasks) in counts.iter().zip(TASKS) {
        assert!(
            count * all_tasks * 10 >= total * tasks * 4,
            "a process was starved: acquisitions per process {counts:?} for {TASKS:?} tasks"
        );
    }
}

/// Many locks held by one backend are renewed (in batches, by the renewal
/// lane) past several TTLs; a lock taken from it in the middle of that is
/// lost, reported not held, and never renewed again: its new holder keeps it.
#[tokio::test]
async fn many_held_locks_stay_held_and_a_lease_taken_away_is_lost_not_renewed() {
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_secs(2);
    let a = support::client(dir.path(), Some(ttl)).await;
    let mut guards = Vec::new();
    for i in 0..100 {
        guards.push(a.lock(&format!("many/{i}")).await.unwrap());
    }
    // An operator breaks lock 7 and someone else takes it.
    let seven = distlock_core::LockName::new("many/7").unwrap();
    let other = support::client(dir.path(), Some(Duration::from_secs(30))).await;
    assert!(other.force_release(&seven).await.unwrap().is_some());
    let theirs = other.try_lock("many/7").await.expect("lock 7 was free");
    let reason = tokio::time::timeout(ttl * 2, guards[7].lost())
        .await
        .expect("lost within two TTLs");
    assert!(!guards[7].is_held(), "lost after {reason:?}");
    // Three more TTLs: the others stay held, lock 7 stays theirs.
    tokio::time::sleep(ttl * 3).await;
    for (i, guard) in guards.iter().enumerate() {
        let health = guard.health();
        assert_eq!(guard.is_held(), i != 7, "lock {i}: {health:?}");
    }
    assert!(theirs.is_held());
    assert!(other.try_lock("many/7").await.is_err(), "still theirs");
    let status = other.inspect(&seven).await.unwrap();
    assert_eq!(status.holder.map(|h| h.token), Some(theirs.token()));
    theirs.release().await.unwrap();
    for guard in guards.drain(..).filter(|g| g.is_held()) {
        guard.release().await.unwrap();
    }
}
