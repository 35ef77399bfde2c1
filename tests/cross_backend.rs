//! The same scenarios against every compiled-in backend, through the facade
//! (`distlock::connect` by URL) on real servers, asserting the same
//! observable outcomes. Backend-specific fault tests live in each backend
//! crate; these check that swapping the URL changes nothing a user relies on.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::Fixture;
use distlock::{AcquireOptions, ElectionBackend, ErrorKind, LockBackend, LockBackendExt, LockName};
use futures::StreamExt;

const BOUND: Duration = Duration::from_secs(30);

/// Six independent clients take one lock 10 times each around a non-atomic
/// update: the count is exact, nobody overlaps, tokens strictly increase.
async fn clients_exclude_each_other_with_increasing_tokens(fixture: &Fixture) {
    let inside = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let backend = distlock::connect(&fixture.url).await.expect("connect");
        let (inside, count, tokens) = (inside.clone(), count.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let guard = backend
                    .lock_timeout("cross/mutex", BOUND)
                    .await
                    .expect("lock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(guard.token());
                let seen = count.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                count.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("bounded")
            .expect("task");
    }
    assert_eq!(count.load(Ordering::SeqCst), 60);
    let tokens = tokens.lock().unwrap();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// A held lock makes `try_lock` fail with `WouldBlock` and a bounded wait
/// fail with `Timeout`; after release both succeed.
async fn busy_lock_reports_would_block_then_timeout(fixture: &Fixture) {
    let a = distlock::connect(&fixture.url).await.expect("connect");
    let b = distlock::connect(&fixture.url).await.expect("connect");
    let held = a.lock("cross/busy").await.expect("lock");
    let err = b.try_lock("cross/busy").await.expect_err("held");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let err = b
        .lock_timeout("cross/busy", Duration::from_millis(300))
        .await
        .expect_err("held");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    held.release().await.expect("release");
    b.try_lock("cross/busy")
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
}

/// A holder that stops renewing and goes away without releasing (as a
/// crashed process would) frees the lock after its TTL, with a greater token.
async fn crashed_holder_expires_with_a_greater_token(fixture: &Fixture) {
    let b = distlock::connect(&fixture.url).await.expect("connect");
    let name = LockName::new("cross/abandon").unwrap();
    let token = {
        let a = distlock::Config {
            ttl: Some(Duration::from_secs(1)),
            ..distlock::Config::from_url(fixture.url.clone())
        };
        let a = distlock::connect_with(&a).await.expect("connect");
        let options = AcquireOptions::new().ttl(Duration::from_secs(1));
        let first = a.acquire(&name, &options).await.expect("lock");
        let token = first.token();
        // Stop renewing, then drop the client: for session-based backends
        // (ZooKeeper) the lease is the client's session.
        first.abandon();
        token
    };
    let next = tokio::time::timeout(BOUND, b.lock("cross/abandon"))
        .await
        .expect("taken over after the TTL")
        .expect("lock");
    assert!(next.token() > token);
    next.release().await.expect("release");
}

/// A leader's resignation hands over to the next candidate, and an observer
/// sees both leaders in order.
async fn election_hands_over_and_observer_follows(fixture: &Fixture) {
    let observer = distlock::connect(&fixture.url).await.expect("connect");
    if observer.election_backend().is_none() {
        assert!(!observer.capabilities().election);
        return;
    }
    let name = LockName::new("cross/election").unwrap();
    let mut leaders = observer.observe(&name).await.expect("observe");
    let first = distlock::connect(&fixture.url).await.expect("connect");
    let second = distlock::connect(&fixture.url).await.expect("connect");
    let one = first
        .campaign(&name, b"one".to_vec(), &AcquireOptions::new())
        .await
        .expect("campaign");
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move {
            second
                .campaign(&name, b"two".to_vec(), &AcquireOptions::new())
                .await
        })
    };
    let seen = tokio::time::timeout(BOUND, leaders.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.value, b"one");
    one.resign().await.expect("resign");
    let two = tokio::time::timeout(BOUND, waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("campaign");
    let seen = tokio::time::timeout(BOUND, leaders.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (seen.value.as_slice(), seen.token),
        (&b"two"[..], two.token())
    );
    two.resign().await.expect("resign");
}

macro_rules! cross_backend_tests {
    ($backend:ident, $fixture:expr) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn clients_exclude_each_other_with_increasing_tokens() {
                super::clients_exclude_each_other_with_increasing_tokens(&$fixture).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn busy_lock_reports_would_block_then_timeout() {
                super::busy_lock_reports_would_block_then_timeout(&$fixture).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn crashed_holder_expires_with_a_greater_token() {
                super::crashed_holder_expires_with_a_greater_token(&$fixture).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn election_hands_over_and_observer_follows() {
                super::election_hands_over_and_observer_follows(&$fixture).await;
            }
        }
    };
}

cross_backend_tests!(
    memory,
    Fixture::new(format!("memory://cross-{}", line!()), ())
);
cross_backend_tests!(file, common::file_fixture());
#[cfg(feature = "etcd")]
cross_backend_tests!(etcd, common::etcd_fixture().await);
#[cfg(feature = "redis")]
cross_backend_tests!(redis, common::redis_fixture().await);
#[cfg(feature = "redis")]
cross_backend_tests!(redlock, common::redlock_fixture().await);
#[cfg(feature = "zk")]
cross_backend_tests!(zk, common::zk_fixture().await);

#[tokio::test]
async fn unknown_and_uncompiled_schemes_are_typed_errors() {
    let err = distlock::connect("consul://h:8500").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.message().contains("known schemes"), "{err}");
    let err = distlock::connect("no-scheme-here").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    for scheme in distlock::Scheme::ALL {
        if !scheme.is_compiled_in() {
            let err = distlock::connect(&format!("{scheme}://127.0.0.1:1"))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        }
    }
}

#[tokio::test]
async fn memory_urls_with_the_same_name_share_locks() {
    let a = distlock::connect("memory://shared-test").await.unwrap();
    let b = distlock::connect("memory://shared-test").await.unwrap();
    let c = distlock::connect("memory://other-test").await.unwrap();
    let held = a.lock("x").await.unwrap();
    assert_eq!(
        b.try_lock("x").await.unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    c.try_lock("x")
        .await
        .expect("a different memory server")
        .release()
        .await
        .unwrap();
    held.release().await.unwrap();
}
