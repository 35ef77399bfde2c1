//! The facade as an application uses it: `connect` by URL, then elections
//! and guarded writes by string names through `distlock::prelude`, with no
//! other import (no `futures`, no `ElectionBackend`, no `LockName`).

use std::time::Duration;

use distlock::prelude::*;

/// Long enough for any step on loopback; a hang fails instead of stalling CI.
const BOUND: Duration = Duration::from_secs(10);

/// The backends every machine has: one in-process table, one lock directory.
fn local_urls(dir: &tempfile::TempDir) -> Vec<String> {
    vec![
        format!("memory://facade-{}", std::process::id()),
        format!("file://{}", dir.path().display()),
    ]
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {BOUND:?}"))
}

/// The next leader `leaders` reports is `value` with `token`.
async fn sees_leader(leaders: &mut Leaders, value: &str, token: FencingToken, url: &str) {
    let seen = within(&format!("leader {value}"), leaders.next())
        .await
        .expect("stream open")
        .expect("leader");
    assert_eq!(seen.value_lossy(), value, "{url}");
    assert_eq!(seen.token(), token, "{url}");
}

/// `elect("name", "value")` takes a `&str` name and any byte-ish value,
/// and `leader_of("name")` reports it.
#[tokio::test]
async fn elect_and_leader_of_take_str_names() {
    let dir = tempfile::tempdir().unwrap();
    for url in local_urls(&dir) {
        let backend = distlock::connect(&url).await.expect("connect");
        let name = "facade/by-str";
        assert_eq!(
            backend.leader_of(name).await.expect("leader"),
            None,
            "{url}"
        );
        let leadership = within("elect", backend.elect(name, "node-1"))
            .await
            .expect("campaign");
        assert_eq!(leadership.name().as_str(), name, "{url}");
        let leader = backend
            .leader_of(name)
            .await
            .expect("leader")
            .expect("a leader");
        assert_eq!(leader.value_lossy(), "node-1", "{url}");
        assert_eq!(leader.token, leadership.token(), "{url}");

        let options = AcquireOptions::new().wait(Wait::No);
        let err = backend
            .elect_with(name, b"node-2".to_vec(), &options)
            .await
            .expect_err("the seat is taken");
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "{url}: {err}");
        leadership.resign().await.expect("resign");
        assert_eq!(
            backend.leader_of(name).await.expect("leader"),
            None,
            "{url}"
        );
    }
}

/// A bad name fails with `InvalidName` before any I/O: the file backend's
/// directory is replaced by a plain file, so any I/O would fail otherwise.
#[tokio::test]
async fn bad_names_fail_before_any_io() {
    let dir = tempfile::tempdir().unwrap();
    let locks = dir.path().join("locks");
    std::fs::create_dir(&locks).unwrap();
    let backend = distlock::connect(&format!("file://{}", locks.display()))
        .await
        .expect("connect");
    std::fs::remove_dir_all(&locks).unwrap();
    std::fs::write(&locks, b"not a directory").unwrap();

    let good = backend
        .elect_with("facade/good", "v", &AcquireOptions::new().wait(Wait::No))
        .await
        .expect_err("the lock directory is gone");
    assert_ne!(good.kind(), ErrorKind::InvalidName, "{good}");

    for bad in ["", "bad\nname"] {
        let checks = [
            ("elect", backend.elect(bad, "v").await.map(drop)),
            (
                "elect_with",
                backend
                    .elect_with(bad, "v", &AcquireOptions::new())
                    .await
                    .map(drop),
            ),
            ("leader_of", backend.leader_of(bad).await.map(drop)),
            ("follow", backend.follow(bad).await.map(drop)),
        ];
        for (call, result) in checks {
            let err = result.expect_err("a bad name is refused");
            assert_eq!(err.kind(), ErrorKind::InvalidName, "{call}({bad:?}): {err}");
        }
    }
}

/// An observer sees each leader in token order with the stream's own
/// `next`, and a resignation hands over to the waiting candidate.
#[tokio::test]
async fn follow_sees_leaders_and_resign_hands_over() {
    let dir = tempfile::tempdir().unwrap();
    for url in local_urls(&dir) {
        let observer = distlock::connect(&url).await.expect("connect");
        let first = distlock::connect(&url).await.expect("connect");
        let second = distlock::connect(&url).await.expect("connect");
        let name = "facade/hand-over";
        let mut leaders = observer.follow(name).await.expect("observe");

        let one = within("campaign", first.elect(name, "one"))
            .await
            .expect("campaign");
        let waiting = tokio::spawn(async move { second.elect(name, "two").await });
        sees_leader(&mut leaders, "one", one.token(), &url).await;
        assert!(!waiting.is_finished(), "{url}: two won while one led");

        let one_token = one.token();
        one.resign().await.expect("resign");
        let two = within("hand-over", waiting)
            .await
            .expect("candidate task")
            .expect("campaign");
        assert!(two.token() > one_token, "{url}");
        sees_leader(&mut leaders, "two", two.token(), &url).await;
        two.resign().await.expect("resign");
    }
}

/// Backends that cannot check ownership inside a write say so, by name,
/// instead of writing unguarded.
#[tokio::test]
async fn guarded_writes_are_unsupported_on_memory_and_file() {
    let dir = tempfile::tempdir().unwrap();
    for (url, backend_name) in local_urls(&dir).into_iter().zip(["memory", "file"]) {
        let backend = distlock::connect(&url).await.expect("connect");
        assert!(!backend.has_guarded_writes(), "{url}");
        let guard = backend.lock("facade/guarded").await.expect("lock");
        let put = backend
            .guarded_put(&guard, "data/report", "done")
            .await
            .expect_err("no guarded writes");
        let owner = backend
            .is_owner(&guard)
            .await
            .expect_err("no guarded writes");
        let leadership = backend.elect("facade/guarded-leader", "me").await.unwrap();
        let as_leader = backend
            .guarded_put(&leadership, "data/report", "done")
            .await
            .expect_err("no guarded writes");
        for err in [put, owner, as_leader] {
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{url}: {err}");
            let expected = format!("the {backend_name} backend");
            assert!(err.message().contains(&expected), "{url}: {err}");
        }
        guard.release().await.unwrap();
        leadership.resign().await.unwrap();
    }
}

/// The facade over `backend` (connected to `url`), which must offer
/// guarded writes, and `name` locked on it, checked to be owned on the
/// server.
#[cfg(any(feature = "etcd", feature = "zk", feature = "redis"))]
async fn owned_lock(backend: impl Into<Backend>, url: &str, name: &str) -> (Backend, LockGuard) {
    let backend = backend.into();
    assert!(backend.has_guarded_writes(), "{url}");
    let guard = backend.lock(name).await.expect("lock");
    assert!(backend.is_owner(&guard).await.expect("is_owner"), "{url}");
    (backend, guard)
}

/// A leader of `facade/leader` may write `path` guarded by its leadership.
#[cfg(any(feature = "etcd", feature = "zk", feature = "redis"))]
async fn leader_puts_guarded(backend: &Backend, path: &str) {
    let leadership = backend.elect("facade/leader", "me").await.unwrap();
    backend
        .guarded_put(&leadership, path, "hi")
        .await
        .expect("guarded put as leader");
    assert!(backend.is_owner(&leadership).await.unwrap());
    leadership.resign().await.unwrap();
}

/// The next holder of `facade/guarded`, after `late` lost it on the server:
/// its token is higher, and its guarded put of `key` commits.
#[cfg(any(feature = "etcd", feature = "zk", feature = "redis"))]
async fn next_holder_writes(backend: &Backend, late: &LockGuard, key: &str) -> LockGuard {
    let next = within("the next holder", backend.lock("facade/guarded"))
        .await
        .expect("the next holder");
    assert!(
        next.token() > late.token(),
        "token {} after {}",
        next.token(),
        late.token()
    );
    backend
        .guarded_put(&next, key, "next")
        .await
        .expect("the next holder's guarded put");
    assert!(backend.is_owner(&next).await.expect("is_owner"));
    next
}

/// A guarded write of `late`, whose lock is gone on the server, is refused.
#[cfg(any(feature = "etcd", feature = "zk", feature = "redis"))]
async fn late_write_refused(backend: &Backend, late: &LockGuard, key: &str) {
    let err = backend
        .guarded_put(late, key, "late")
        .await
        .expect_err("the late write is refused");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    let err = backend
        .guarded_delete(late, key)
        .await
        .expect_err("the late delete is refused");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
}

/// Redis: a script checks the lock's owner and token with the write; the
/// holder whose key expired on the server is refused, the next one writes.
#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_guarded_put_commits_only_while_held() {
    let server =
        distlock_testkit::assert::started(distlock_testkit::servers::RedisServer::start()).await;
    let backend = distlock::connect(&server.url()).await.expect("connect");
    assert!(backend.capabilities().guarded_writes);
    let (backend, guard) = owned_lock(backend, &server.url(), "facade/guarded").await;
    backend
        .guarded_put(&guard, "report", "one")
        .await
        .expect("guarded put while held");
    let get = async |key: &str| match server.command(&["GET", key]).await.expect("GET") {
        distlock_testkit::servers::RespReply::Bulk(value) => value,
        other => panic!("GET {key}: {other:?}"),
    };
    assert_eq!(get("report").await.as_deref(), Some("one"));

    // The holder's key expires on the server; the guard has not noticed.
    server.command(&["DEL", guard.key()]).await.expect("DEL");
    assert!(guard.is_held());
    assert!(!backend.is_owner(&guard).await.expect("is_owner"));
    late_write_refused(&backend, &guard, "report").await;
    assert_eq!(get("report").await.as_deref(), Some("one"));
    let next = next_holder_writes(&backend, &guard, "report").await;
    late_write_refused(&backend, &guard, "report").await;
    assert_eq!(get("report").await.as_deref(), Some("next"));
    assert!(backend.redis().is_some());
    next.release().await.expect("release");
    drop(guard);
    leader_puts_guarded(&backend, "leader-note").await;
}

/// Redlock cannot check a majority's lock in one server's script: it says so.
#[cfg(feature = "redis")]
#[tokio::test]
async fn redlock_guarded_writes_are_unsupported_and_say_why() {
    let fixture = distlock_testkit::fixtures::redlock().await;
    let backend = distlock::connect(&fixture.url).await.expect("connect");
    assert!(!backend.has_guarded_writes());
    assert!(!backend.capabilities().guarded_writes);
    let guard = backend.lock("facade/guarded").await.expect("lock");
    let err = backend
        .guarded_put(&guard, "report", "one")
        .await
        .expect_err("no guarded writes on Redlock");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.message().contains("majority"), "{err}");
    guard.release().await.expect("release");
}

/// etcd: the put commits while the lock is held, and the server refuses it
/// once the holder's key is gone, even though the guard has not noticed yet.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_guarded_put_commits_only_while_held() {
    use distlock::etcd::{EtcdBackend, EtcdConfig};

    let fixture = distlock_testkit::fixtures::etcd().await;
    let etcd = EtcdBackend::connect(EtcdConfig::from_url(&fixture.url).unwrap());
    let etcd = etcd.await.expect("connect");
    let mut client = etcd.client();
    let (backend, guard) = owned_lock(etcd, &fixture.url, "facade/guarded").await;
    backend
        .guarded_put(&guard, "/app/report", "one")
        .await
        .expect("guarded put while held");
    let read = |reply: distlock::etcd::etcd_client::GetResponse| {
        reply.kvs().first().map(|kv| kv.value().to_vec())
    };
    assert_eq!(
        read(client.get("/app/report", None).await.unwrap()),
        Some(b"one".to_vec())
    );

    // The holder's key disappears on the server (as when its lease expires);
    // the guard still believes it holds the lock.
    client.delete(guard.key(), None).await.unwrap();
    assert!(guard.is_held());
    assert!(!backend.is_owner(&guard).await.expect("is_owner"));
    let err = backend
        .guarded_put(&guard, "/app/report", "two")
        .await
        .expect_err("refused by the server");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(
        read(client.get("/app/report", None).await.unwrap()),
        Some(b"one".to_vec()),
        "nothing was written"
    );
    let next = next_holder_writes(&backend, &guard, "/app/report").await;
    assert_eq!(
        read(client.get("/app/report", None).await.unwrap()),
        Some(b"next".to_vec())
    );
    late_write_refused(&backend, &guard, "/app/report").await;
    assert_eq!(
        read(client.get("/app/report", None).await.unwrap()),
        Some(b"next".to_vec())
    );
    assert!(backend.guarded_delete(&next, "/app/report").await.unwrap());
    assert!(!backend.guarded_delete(&next, "/app/report").await.unwrap());
    next.release().await.expect("release");
    drop(guard);
    leader_puts_guarded(&backend, "/app/leader-note").await;
}

/// ZooKeeper: the put creates or replaces the node while the lock is held,
/// and the server refuses it once the lock node is gone.
#[cfg(feature = "zk")]
#[tokio::test]
async fn zk_guarded_put_commits_only_while_held() {
    use distlock::zk::{ZkBackend, ZkConfig};

    let fixture = distlock_testkit::fixtures::zk().await;
    let zk = ZkBackend::connect(ZkConfig::from_url(&fixture.url).unwrap());
    let zk = zk.await.expect("connect");
    let client = zk.client();
    let (backend, guard) = owned_lock(zk, &fixture.url, "facade/guarded").await;
    backend
        .guarded_put(&guard, "/report", "one")
        .await
        .expect("guarded create while held");
    backend
        .guarded_put(&guard, "/report", "two")
        .await
        .expect("guarded update while held");
    assert_eq!(client.get_data("/report").await.unwrap().0, b"two");

    client.delete(guard.key(), None).await.unwrap();
    assert!(!backend.is_owner(&guard).await.expect("is_owner"));
    let err = backend
        .guarded_put(&guard, "/report", "three")
        .await
        .expect_err("refused by the server");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(client.get_data("/report").await.unwrap().0, b"two");
    let next = next_holder_writes(&backend, &guard, "/report").await;
    assert_eq!(client.get_data("/report").await.unwrap().0, b"next");
    late_write_refused(&backend, &guard, "/report").await;
    assert_eq!(client.get_data("/report").await.unwrap().0, b"next");
    assert!(backend.guarded_delete(&next, "/report").await.unwrap());
    assert!(!backend.guarded_delete(&next, "/report").await.unwrap());
    next.release().await.expect("release");
    drop(guard);
    leader_puts_guarded(&backend, "/leader-note").await;
}

/// A Backend from `connect()` on etcd or ZooKeeper has guarded writes.
#[cfg(all(feature = "etcd", feature = "zk"))]
#[tokio::test]
async fn guarded_writes_work_on_connected_etcd_and_zk() {
    for fixture in [
        distlock_testkit::fixtures::etcd().await,
        distlock_testkit::fixtures::zk().await,
    ] {
        let url = &fixture.url;
        let backend = distlock::connect(url).await.expect("connect");
        let (backend, guard) = owned_lock(backend, url, "facade/connected").await;
        backend
            .guarded_put(&guard, "/connected-note", "hi")
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        guard.release().await.expect("release");
    }
}

/// The caller's error type in the `try_with_lock` tests: its own failures,
/// and the lock's through `From<distlock::Error>`.
#[derive(Debug, PartialEq)]
enum JobError {
    Failed(&'static str),
    Lock(ErrorKind),
}

impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        JobError::Lock(e.kind())
    }
}

/// `try_with_lock` returns the work's own `Result`, not one nested in the
/// lock's: `?` gives the value, the work's error comes out as itself, and
/// a lock error becomes the caller's error through `From`. The lock is
/// released whichever way the work ended.
#[tokio::test]
async fn try_with_lock_returns_the_works_result_unnested() {
    let backend = distlock::connect(&format!("memory://try-{}", std::process::id()))
        .await
        .unwrap();
    let rows: Result<u64, JobError> = within(
        "try_with_lock",
        backend.try_with_lock("jobs/nightly", |held| async move {
            assert!(held.token().get() > 0);
            Ok(3)
        }),
    )
    .await;
    assert_eq!(rows, Ok(3));

    let failed: Result<u64, JobError> = within(
        "try_with_lock",
        backend.try_with_lock("jobs/nightly", |_| async {
            Err(JobError::Failed("disk full"))
        }),
    )
    .await;
    assert_eq!(failed, Err(JobError::Failed("disk full")));
    // Released after the failure: taken again at once.
    backend
        .try_lock("jobs/nightly")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let bad_name: Result<u64, JobError> = within(
        "try_with_lock",
        backend.try_with_lock("", |_| async { Ok(1) }),
    )
    .await;
    assert_eq!(bad_name, Err(JobError::Lock(ErrorKind::InvalidName)));
}

/// A token binds to a signed `BIGINT` column with a checked conversion,
/// and a leader's token is read with the same method as a guard's.
#[tokio::test]
async fn tokens_convert_to_i64_and_read_alike_everywhere() {
    let backend = distlock::connect(&format!("memory://tokens-{}", std::process::id()))
        .await
        .unwrap();
    let guard = backend.lock("jobs/token").await.unwrap();
    let signed = i64::try_from(guard.token()).expect("a memory token fits");
    assert_eq!(u64::try_from(signed).unwrap(), guard.token().get());
    guard.release().await.unwrap();
    let err = FencingToken(u64::MAX).to_i64().unwrap_err();
    assert!(err.to_string().contains(&u64::MAX.to_string()), "{err}");

    let leadership = backend.elect("jobs/leader", "me").await.unwrap();
    let leader = backend
        .leader_of("jobs/leader")
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(leader.token(), leadership.token());
    assert_eq!(leader.key(), leadership.key());
}

/// An app can tell that `memory://` coordinates only its own process:
/// its capabilities say it is not cross-process, and the file backend's do.
#[tokio::test]
async fn memory_says_it_is_process_local() {
    let dir = tempfile::tempdir().unwrap();
    let [memory, file] = <[String; 2]>::try_from(local_urls(&dir)).unwrap();
    let memory = distlock::connect(&memory).await.unwrap().capabilities();
    assert!(!memory.cross_process, "{memory:?}");
    assert_eq!(memory.fencing, distlock::FencingStrength::ProcessLocal);
    let file = distlock::connect(&file).await.unwrap().capabilities();
    assert!(file.cross_process, "{file:?}");
}

/// A backend built by hand keeps, through `Backend::from`, what the facade
/// offers for it: Redis its guarded writes and its client, PostgreSQL its
/// client (for fenced transactions), file and memory the core traits; each
/// is described by where it is, without credentials.
#[cfg(all(feature = "redis", feature = "postgres"))]
#[tokio::test]
async fn hand_built_backends_keep_what_the_facade_offers() {
    use distlock_testkit::servers::{PostgresServer, RedisServer};

    let redis = distlock_testkit::assert::started(RedisServer::start()).await;
    let config = distlock_redis::RedisConfig::from_url(&redis.url()).expect("redis config");
    let hand_built = distlock_redis::RedisBackend::connect(config)
        .await
        .expect("connect redis");
    let (backend, guard) = owned_lock(hand_built, &redis.url(), "facade/hand-built").await;
    assert!(backend.redis().is_some());
    assert!(backend.postgres().is_none());
    backend
        .guarded_put(&guard, "hand-built/report", "done")
        .await
        .expect("guarded put while held");
    assert_eq!(
        backend.description(),
        format!("redis://127.0.0.1:{}/0", redis.port())
    );
    guard.release().await.expect("release");

    let postgres = distlock_testkit::assert::started(PostgresServer::start()).await;
    let config =
        distlock_postgres::PostgresConfig::from_url(&postgres.url()).expect("postgres config");
    let hand_built = distlock_postgres::PostgresBackend::connect(config)
        .await
        .expect("connect postgres");
    let backend = Backend::from(hand_built);
    assert!(backend.postgres().is_some());
    assert!(!backend.has_guarded_writes());
    assert_eq!(
        backend.description(),
        format!("postgres://127.0.0.1:{}/postgres", postgres.port())
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let file = distlock_file::FileBackend::connect(distlock_file::FileConfig::new(dir.path()))
        .await
        .expect("open file backend");
    let memory = distlock::memory::MemoryBackend::new();
    for backend in [Backend::from(file), Backend::from(memory)] {
        let guard = backend.lock("facade/hand-built").await.expect("lock");
        assert!(!backend.has_guarded_writes());
        guard.release().await.expect("release");
    }
}
