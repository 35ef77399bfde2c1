//! ZooKeeper-specific behaviour on a real standalone server: typed errors
//! without hanging, ACLs that protect lock nodes from other identities, and
//! writes guarded by the lock.

mod support;

use distlock_zk::ClientConfig;
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackend, LockBackendExt, LostReason, LostSignal};
use distlock_testkit::assert::{acquired_and_released, fails_with, joined};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{ZkEnsemble, ZkOptions};
use distlock_zk::{WriteOutcome, ZkBackend, ZkConfig, zk};
use tokio::time::{Instant, timeout};

use support::{
    Proxied, Standalone, config, connect, connect_pair, lock_and_release, proxied_with, raw_client,
    standalone, until_children, until_watches,
};

const SESSION: Duration = Duration::from_secs(2);
/// Extra time allowed over a configured timeout before calling it a hang.
const SLACK: Duration = Duration::from_secs(2);

/// Connects and expects an error of `kind` within the connect timeout plus slack.
async fn connect_fails(config: ZkConfig, kind: ErrorKind) -> distlock_core::Error {
    let bound = config.connect_timeout + config.request_timeout + SLACK;
    let start = Instant::now();
    let err = timeout(bound, ZkBackend::connect(config))
        .await
        .unwrap_or_else(|_| panic!("connect hung past {bound:?}"))
        .expect_err("connect must fail");
    assert_eq!(err.kind(), kind, "{err}");
    tracing::info!(elapsed = ?start.elapsed(), %err, "connect failed as expected");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_unauthorized() {
    let Standalone { addrs, .. } = &standalone().await;
    let owner =
        ZkBackend::connect(config(addrs, "/secure", SESSION).with_credentials("alice", "right"))
            .await
            .expect("the owner connects");
    let wrong_password = config(addrs, "/secure", SESSION).with_credentials("alice", "wrong");
    let err = connect_fails(wrong_password, ErrorKind::Unauthorized).await;
    assert!(
        err.message().contains("alice") && err.message().contains(&addrs[0]),
        "{err}"
    );
    assert!(
        !err.to_string().contains("wrong"),
        "the password leaked: {err}"
    );
    connect_fails(
        config(addrs, "/secure", SESSION).with_credentials("bob", "right"),
        ErrorKind::Unauthorized,
    )
    .await;
    connect_fails(config(addrs, "/secure", SESSION), ErrorKind::Unauthorized).await;
    let guard = owner
        .try_lock("still-usable")
        .await
        .expect("the owner still locks");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_unavailable_within_connect_timeout() {
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let quick = Duration::from_secs(2);
    let err = connect_fails(
        config(std::slice::from_ref(&refused), "/x", SESSION).with_connect_timeout(quick),
        ErrorKind::Unavailable,
    )
    .await;
    assert!(err.message().contains(&refused), "{err}");
    assert!(err.message().contains("is a ZooKeeper server"), "{err}");
    assert!(
        !err.message().contains("scripts/"),
        "library errors name no repository script: {err}"
    );
    // A server that accepts connections but never answers.
    let silent = FaultProxy::start(refused.parse().unwrap()).await.unwrap();
    silent.blackhole();
    let err = connect_fails(
        config(&[silent.addr().to_string()], "/x", SESSION).with_connect_timeout(quick),
        ErrorKind::Unavailable,
    )
    .await;
    assert!(err.message().contains(&silent.addr().to_string()), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncreatable_lock_root_is_a_typed_error() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let read_only = [zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())];
    // A parent the client may not write, and one that cannot have children:
    // the parent, how it is created, the error and what its message names.
    let cases = [
        (
            "/frozen",
            zk::CreateMode::Persistent.with_acls(zk::Acls::new(&read_only)),
            ErrorKind::Unauthorized,
            "/frozen/locks",
        ),
        (
            "/session-node",
            zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
            ErrorKind::InvalidConfig,
            "ephemeral",
        ),
    ];
    for (parent, mode, kind, named) in cases {
        admin
            .create(parent, &[], &mode)
            .await
            .unwrap_or_else(|e| panic!("create {parent}: {e}"));
        let root = format!("{parent}/locks");
        let err = connect_fails(config(addrs, &root, SESSION), kind).await;
        assert!(err.message().contains(named), "{parent}: {err}");
    }
    let err = ZkConfig::from_url(&format!("zk://{}/a/../b", addrs[0])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_identities_cannot_delete_lock_nodes() {
    let Standalone { addrs, .. } = &standalone().await;
    let as_alice = async || {
        ZkBackend::connect(config(addrs, "/acl", SESSION).with_credentials("alice", "pw"))
            .await
            .expect("alice connects")
    };
    let alice = as_alice().await;
    let guard = alice.try_lock("protected").await.expect("alice locks");
    for auth in [Some("bob:pw"), Some("alice:not-pw"), None] {
        let other = raw_client(addrs, auth).await;
        let err = other
            .delete(guard.key(), None)
            .await
            .expect_err("another identity must not delete alice's node");
        assert_eq!(err, zk::Error::NoAuth, "{auth:?}");
        let (data, _) = other.get_data(guard.key()).await.expect("others may read");
        let holder = String::from_utf8(data).expect("the description is text");
        assert!(
            holder.ends_with(&format!(":{}", std::process::id())),
            "others see who holds it: {holder:?}"
        );
    }
    assert!(guard.is_held());
    let alice_again = as_alice().await;
    fails_with(
        ErrorKind::WouldBlock,
        "still held",
        alice_again.try_lock("protected").await,
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_write_commits_only_while_held() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let backend = connect(addrs, "/guarded", SESSION).await;
    let guard = backend.lock("ledger").await.expect("lock");
    let entry = format!("/guarded/entry-{}", guard.token());
    let outcomes = backend
        .guarded_write(&guard)
        .create(entry.clone(), b"first".to_vec())
        .set_data(entry.clone(), b"second".to_vec(), Some(0))
        .commit()
        .await
        .expect("write under the lock");
    assert_eq!(
        outcomes,
        vec![
            WriteOutcome::Created {
                path: entry.clone()
            },
            WriteOutcome::Updated { version: 1 }
        ]
    );
    // The lock is taken away from outside; the holder learns it, and the
    // guarded write is refused by the server even if sent regardless.
    admin
        .delete(guard.key(), None)
        .await
        .expect("kill the lock node");
    let reason = timeout(SESSION + SLACK, guard.lost())
        .await
        .expect("lost signal");
    assert_eq!(reason, LostReason::Revoked);
    let err = backend
        .guarded_write(&guard)
        .set_data(entry.clone(), b"stale".to_vec(), None)
        .commit()
        .await
        .expect_err("no write after the lock is lost");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    let (data, _) = admin.get_data(&entry).await.expect("read back");
    assert_eq!(data, b"second");
    // A failing operation names itself and writes nothing.
    let guard = backend.lock("ledger").await.expect("lock again");
    let err = backend
        .guarded_write(&guard)
        .set_data(entry.clone(), b"third".to_vec(), None)
        .create(entry.clone(), b"duplicate".to_vec())
        .commit()
        .await
        .expect_err("create of an existing node fails");
    assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
    assert!(err.message().contains("operation 1 (create"), "{err}");
    let (data, _) = admin.get_data(&entry).await.expect("read back");
    assert_eq!(data, b"second");
    guard.release().await.expect("release");
}

/// The guarded writes under the names every backend shares: once the lock
/// node is gone on the server (as when the holder's session expires), the
/// holder is refused, and the next holder, with a higher token, writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_put_and_delete_refuse_a_holder_whose_node_is_gone() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let (a, b) = connect_pair(addrs, "/named", SESSION).await;
    assert!(a.capabilities().guarded_writes);
    let first = a.lock("ledger").await.expect("lock");
    a.guarded_put(&first, "/named-entry", "one")
        .await
        .expect("guarded create while held");
    assert!(a.is_owner(&first).await.expect("is_owner"));

    admin
        .delete(first.key(), None)
        .await
        .expect("the lock node goes, as on session expiry");
    let second = timeout(SESSION + SLACK, b.lock("ledger"))
        .await
        .expect("the next holder in time")
        .expect("the next holder");
    assert!(second.token() > first.token());
    for err in [
        a.guarded_put(&first, "/named-entry", "late")
            .await
            .unwrap_err(),
        a.guarded_delete(&first, "/named-entry").await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    }
    assert!(!a.is_owner(&first).await.expect("is_owner"));
    b.guarded_put(&second, "/named-entry", "two")
        .await
        .expect("the next holder writes");
    let (data, _) = admin.get_data("/named-entry").await.expect("read back");
    assert_eq!(data, b"two");
    assert!(b.guarded_delete(&second, "/named-entry").await.unwrap());
    assert!(!b.guarded_delete(&second, "/named-entry").await.unwrap());
    second.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_wait_leaves_no_queue_node() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let (a, b) = connect_pair(addrs, "/timeout", SESSION).await;
    let held = a.lock("busy").await.expect("lock");
    let dir = "/timeout/locks/busy";
    let err = b
        .lock_timeout("busy", Duration::from_millis(300))
        .await
        .expect_err("times out");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let err = b.try_lock("busy").await.expect_err("would block");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    let left = until_children(admin, dir, 1, SLACK).await;
    assert_eq!(
        format!("{dir}/{}", left[0]),
        held.key(),
        "only the holder's node is left"
    );
    held.release().await.expect("release");
    until_children(admin, dir, 0, SLACK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_with_create_in_flight_leaves_no_node() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let client = support::proxied(&addrs[0], "/cancel", Duration::from_secs(6)).await;
    let holder = connect(addrs, "/cancel", SESSION).await;
    let held = holder.lock("in-flight").await.expect("lock");
    let dir = "/cancel/locks/in-flight";
    // The create reaches the server, but its reply is still in the proxy
    // when the acquisition is cancelled: only the GUID finds the node.
    client.proxy.delay(Duration::from_millis(400));
    let acquiring = tokio::spawn({
        let backend = client.backend.clone();
        async move { backend.lock("in-flight").await }
    });
    until_children(admin, dir, 2, SLACK).await;
    acquiring.abort();
    assert!(acquiring.await.unwrap_err().is_cancelled());
    until_children(admin, dir, 1, SLACK * 2).await;
    held.release().await.expect("release");
    until_children(admin, dir, 0, SLACK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_outside_the_bmp_lock_and_stay_distinct() {
    let Standalone { addrs, .. } = &standalone().await;
    let (a, b) = connect_pair(addrs, "/emoji", SESSION).await;
    // Each of these is a distinct valid name; the last one is what the
    // first one's escaping would look like if it were written out.
    let names = ["🔒", "🔒🔒", "🔑", "a🔒b", "%F0%9F%94%92"];
    let mut guards = Vec::new();
    for name in names {
        let guard = a
            .try_lock(name)
            .await
            .unwrap_or_else(|e| panic!("lock {name:?}: {e}"));
        let what = format!("another client is excluded from {name:?}");
        fails_with(ErrorKind::WouldBlock, &what, b.try_lock(name).await);
        guards.push(guard);
    }
    let mut dirs: Vec<&str> = guards
        .iter()
        .map(|g| g.key().rsplit_once('/').expect("a node path").0)
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    assert_eq!(
        dirs.len(),
        names.len(),
        "two names share a directory: {dirs:?}"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
    let again = b.try_lock("🔒").await.expect("free after release");
    again.release().await.expect("release");
}

/// `signal` fires with `Released` (`what` says when it should), and only
/// once the holder's node `key` is gone from the server.
async fn released_once_deleted(signal: &LostSignal, admin: &zk::Client, key: &str, what: &str) {
    timeout(SLACK * 2, signal.lost()).await.expect(what);
    assert_eq!(signal.reason(), Some(LostReason::Released));
    assert!(
        admin.check_stat(key).await.expect("stat").is_none(),
        "Released fired while {key} still exists"
    );
}

/// One acquisition through a faulty connection: it must return within its
/// wait plus one request timeout, with an error that says the outcome was
/// not learned in time (never `WouldBlock`: nobody saw the lock held).
async fn bounded_under_fault(
    addrs: &[String],
    fault: impl FnOnce(&FaultProxy),
    wait: Option<Duration>,
) -> FaultProxy {
    let request = Duration::from_secs(1);
    let Proxied { backend, proxy } =
        proxied_with(&addrs[0], "/bounded", Duration::from_secs(8), |config| {
            config.with_request_timeout(request)
        })
        .await;
    fault(&proxy);
    let start = Instant::now();
    let bound = wait.unwrap_or_default() + request;
    let result = timeout(bound * 20, async {
        match wait {
            Some(wait) => backend.lock_timeout("slow", wait).await,
            None => backend.try_lock("slow").await,
        }
    })
    .await
    .unwrap_or_else(|_| panic!("hung past {:?}", bound * 20));
    let elapsed = start.elapsed();
    let err = result.expect_err("the lock is held and the connection is faulty");
    assert!(
        matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
        "{err}"
    );
    assert!(err.message().contains("slow"), "{err}");
    assert!(
        elapsed <= bound + Duration::from_millis(500),
        "wait {wait:?}, request timeout {request:?}: returned after {elapsed:?} ({err})"
    );
    proxy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_under_faults_returns_within_wait_plus_request_timeout() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let holder = connect(addrs, "/bounded", SESSION).await;
    let held = holder.lock("slow").await.expect("lock");
    let half = Some(Duration::from_millis(500));
    let proxies = [
        bounded_under_fault(addrs, FaultProxy::blackhole, None).await,
        bounded_under_fault(addrs, FaultProxy::blackhole, half).await,
        // Round trips of 1.4 s: every request times out, yet the client's
        // connection (2 s silence limit) stays up.
        bounded_under_fault(addrs, |p| p.delay(Duration::from_millis(700)), half).await,
    ];
    // Whatever the faulty clients left in the queue goes once they reach
    // the server again (or their sessions expire).
    for proxy in &proxies {
        proxy.delay(Duration::ZERO);
        proxy.restore();
    }
    let left = until_children(admin, "/bounded/locks/slow", 1, Duration::from_secs(10)).await;
    assert_eq!(format!("/bounded/locks/slow/{}", left[0]), held.key());
    held.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_timeout_outside_the_servers_range_fails_connect() {
    support::init_tracing();
    let server = ZkEnsemble::start_with(
        ZkOptions::new(1).session_timeouts(Duration::from_millis(1500), Duration::from_secs(3)),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start ZooKeeper for the test: {e}"));
    let addrs = server.addrs();
    for (requested, granted) in [
        (Duration::from_secs(1), "1.5s"),
        (Duration::from_secs(4), "3s"),
    ] {
        let err = connect_fails(
            config(&addrs, "/range", requested),
            ErrorKind::InvalidConfig,
        )
        .await;
        let message = err.message();
        assert!(
            message.contains(&format!("{requested:?}")) && message.contains(granted),
            "names the requested {requested:?} and the server's {granted}: {err}"
        );
        assert!(message.contains(&addrs[0]), "{err}");
    }
    let inside = ZkBackend::connect(config(&addrs, "/range", Duration::from_secs(2)))
        .await
        .expect("a session timeout inside the range connects");
    assert_eq!(inside.session_timeout(), Duration::from_secs(2));
    let caps = inside.capabilities();
    assert_eq!(caps.min_ttl, distlock_zk::MIN_SESSION_TIMEOUT);
    assert_eq!(caps.ttl_granularity, Duration::from_millis(1));
    let guard = inside.try_lock("in-range").await.expect("lock");
    assert_eq!(guard.ttl(), Duration::from_secs(2));
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_a_deletion_behind_our_back_reports_the_deletion() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let backend = connect(addrs, "/deleted", SESSION).await;
    for _ in 0..5 {
        // Deleted before the own-node watch is armed: only the release's
        // delete can learn it.
        let guard = backend.try_lock("gone").await.expect("lock");
        let signal = guard.lost_signal();
        admin
            .delete(guard.key(), None)
            .await
            .expect("delete the holder's node from outside");
        let err = guard
            .release()
            .await
            .expect_err("the node was already gone");
        assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
        assert_eq!(
            signal.reason(),
            Some(LostReason::Revoked),
            "the lost signal hides that the lock was taken away"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_release_fires_released_only_once_the_node_is_deleted() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let Proxied { backend, proxy } = proxied_with(
        &addrs[0],
        "/unconfirmed",
        Duration::from_secs(4),
        |config| config.with_request_timeout(Duration::from_millis(300)),
    )
    .await;
    let guard = backend.lock("slow-release").await.expect("lock");
    let key = guard.key().to_owned();
    let signal = guard.lost_signal();
    proxy.blackhole();
    distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::Unavailable, ErrorKind::Timeout],
        "the delete is not confirmed",
        guard.release().await,
    );
    assert_eq!(
        signal.reason(),
        None,
        "released locally while the node may still exist"
    );
    proxy.restore();
    let what = "the delete is confirmed once the connection returns";
    released_once_deleted(&signal, admin, &key, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_from_the_head_confirms_our_node_still_exists() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let (a, b) = connect_pair(addrs, "/handover", SESSION).await;
    let held = a.lock("next").await.expect("lock");
    until_watches(&addrs[0], 1, SLACK).await; // the holder's own-node watch
    let waiting = tokio::spawn(async move { b.lock("next").await });
    let dir = "/handover/locks/next";
    let children = until_children(admin, dir, 2, SLACK).await;
    until_watches(&addrs[0], 2, SLACK).await; // the waiter's watch on the head
    let ours = children
        .iter()
        .map(|c| format!("{dir}/{c}"))
        .find(|path| path != held.key())
        .expect("the waiter's node");
    // Both go in one transaction, the head first: the waiter learns that
    // its predecessor is gone before it learns about its own node.
    let mut multi = admin.new_multi_writer();
    multi.add_delete(held.key(), None).unwrap();
    multi.add_delete(&ours, None).unwrap();
    multi.commit().await.expect("delete both nodes");
    let result = joined(SLACK, "the waiter returns", waiting).await;
    match result {
        Ok(guard) => panic!(
            "acquired {} although that node is gone (is_held {})",
            guard.key(),
            guard.is_held()
        ),
        Err(err) => assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_of_ours_ahead_of_us_does_not_deadlock_the_name() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let new_client = async || connect(addrs, "/duplicate", SESSION).await;
    let (a, b, c) = (new_client().await, new_client().await, new_client().await);
    let dir = "/duplicate/locks/twice";
    // Sequence 0 is used up, so a node named with it sorts first.
    lock_and_release(&a, "twice", "lock").await;
    let first = a.lock("twice").await.expect("lock");
    let second = tokio::spawn(async move { b.lock("twice").await });
    until_children(admin, dir, 2, SLACK).await;
    let third = tokio::spawn(async move { c.lock_timeout("twice", SESSION * 2).await });
    let children = until_children(admin, dir, 3, SLACK).await;
    let last = paths_in_queue_order(children).pop().expect("three nodes");
    // What a retried protected create can leave when the first create's
    // reply was lost and the lookup missed it: a second node with the
    // waiter's GUID, ahead of the waiter's own.
    let guid_marker = &last[..last.find("-lock-").expect("a contender node") + 1];
    let duplicate = format!("{dir}/{guid_marker}lock-0000000000");
    admin
        .create(
            &duplicate,
            &[],
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("create the duplicate");
    first.release().await.expect("release");
    let second = joined(SLACK, "the second client gets the lock", second)
        .await
        .expect("lock");
    second.release().await.expect("release");
    let guard = joined(SESSION * 2 + SLACK, "the waiter returns", third)
        .await
        .expect("the waiter gets the lock instead of waiting for its own duplicate");
    assert_eq!(guard.key(), format!("{dir}/{last}"));
    // Its delete was sent before the waiter went on; another session may
    // read before it is applied.
    let deadline = Instant::now() + SLACK;
    while admin.check_stat(&duplicate).await.expect("stat").is_some() {
        assert!(Instant::now() < deadline, "the duplicate is never deleted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    guard.release().await.expect("release");
    until_children(admin, dir, 0, SLACK).await;
}

/// Contender node names sorted by their sequence suffix.
fn paths_in_queue_order(mut children: Vec<String>) -> Vec<String> {
    children.sort_by_key(|c| c.rsplit('-').next().unwrap_or_default().to_owned());
    children
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_or_runtimeless_dropped_locks_free_up_while_the_backend_lives() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let new_client = async || connect(addrs, "/abandon", SESSION).await;
    let (holder, other) = (new_client().await, new_client().await);
    // Freed as if its holder had crashed: after about one session timeout.
    let bound = SESSION + SLACK;
    holder.try_lock("abandoned").await.expect("lock").abandon();
    acquired_and_released(
        "an abandoned lock is freed while its backend lives",
        other.lock_timeout("abandoned", bound),
    )
    .await;
    // A guard dropped on a thread without a runtime: released at once, on
    // the session's runtime, well before a session timeout.
    let guard = holder.try_lock("dropped").await.expect("lock");
    std::thread::spawn(move || drop(guard)).join().unwrap();
    acquired_and_released(
        "a guard dropped without a runtime is released at once",
        other.lock_timeout("dropped", SESSION / 2),
    )
    .await;
    // An acquisition dropped, while queued, on a thread without a runtime.
    let held = other.lock("queued").await.expect("lock");
    let mut acquiring = Box::pin({
        let holder = holder.clone();
        async move { holder.lock("queued").await }
    });
    let dir = "/abandon/locks/queued";
    let deadline = Instant::now() + SLACK;
    while admin.list_children(dir).await.unwrap_or_default().len() < 2 {
        assert!(futures::poll!(&mut acquiring).is_pending());
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::thread::spawn(move || drop(acquiring)).join().unwrap();
    held.release().await.expect("release");
    until_children(admin, dir, 0, bound).await;
    let third = new_client().await;
    lock_and_release(&third, "queued", "nothing is left in the queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_release_still_reports_its_outcome() {
    let Standalone { addrs, admin, .. } = &standalone().await;
    let client = support::proxied(&addrs[0], "/cancel-release", Duration::from_secs(4)).await;
    let guard = client.backend.lock("cut-short").await.expect("lock");
    let key = guard.key().to_owned();
    let signal = guard.lost_signal();
    client.proxy.delay(Duration::from_millis(100));
    // The delete is sent; its reply is still in the proxy when the release
    // is dropped.
    timeout(Duration::from_millis(20), guard.release())
        .await
        .expect_err("the release is cut short");
    let what = "the lost signal fires once the delete is confirmed";
    released_once_deleted(&signal, admin, &key, what).await;
}
