//! Election beyond the conformance suite: takeover after a leader crash, and
//! a deposed leader that can no longer proclaim.

mod support;

use std::time::Duration;

use distlock_core::{Candidacy, ElectionBackend, ErrorKind, LockName};
use distlock_testkit::assert::within;
use futures::StreamExt;
use support::TTL;

/// When the leader crashes (stops renewing), a waiting candidate takes over
/// after the TTL and observers see the new leader with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn observer_sees_takeover_after_leader_crash() {
    let server = support::start_redis().await;
    let (a, b, watcher) = (
        support::client(&server).await,
        support::client(&server).await,
        support::client(&server).await,
    );
    let name = LockName::new("election/crash").unwrap();
    let mut leaders = watcher.observe(&name).await.expect("observe");
    let first = a
        .campaign(&name, Candidacy::new("a"))
        .await
        .expect("campaign a");
    let seen = within(Duration::from_secs(3), "first leader", leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((seen.value, seen.token), (b"a".to_vec(), first.token()));
    let follower = {
        let name = name.clone();
        tokio::spawn(async move { b.campaign(&name, Candidacy::new("b")).await })
    };
    let first_token = first.token();
    first.abandon();
    let seen = within(TTL * 3 + Duration::from_secs(3), "takeover", leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.value, b"b".to_vec());
    assert!(seen.token > first_token);
    let second = follower.await.unwrap().expect("campaign b");
    assert_eq!(second.token(), seen.token);
    second.resign().await.expect("resign");
}

/// A leader whose key was deleted cannot proclaim, learns it lost, and
/// `leader()` reports nobody.
#[tokio::test]
async fn deposed_leader_cannot_proclaim() {
    let server = support::start_redis().await;
    let client = support::client(&server).await;
    let name = LockName::new("election/deposed").unwrap();
    let leadership = client
        .campaign(&name, Candidacy::new("v1"))
        .await
        .expect("campaign");
    server
        .command(&["DEL", leadership.key()])
        .await
        .expect("DEL");
    let err = leadership
        .proclaim(b"v2".to_vec())
        .await
        .expect_err("deposed");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(!leadership.is_leader());
    assert_eq!(client.leader(&name).await.expect("leader"), None);
    assert_eq!(leadership.value(), b"v1".to_vec());
}
