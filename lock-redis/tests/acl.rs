//! A Redis user whose ACL allows only the keys and channels under one
//! prefix (`~app:* &app:*`) can lock, wait and elect there, and is refused
//! under any other prefix: an operator can keep each application to its
//! own key space.

mod support;

use std::time::Duration;

use distlock_core::{ClientConfig, ErrorKind, LockBackendExt};
use distlock_redis::RedisBackend;
use distlock_testkit::assert::joined;
use distlock_testkit::servers::RespReply;
use support::{config_for, start_redis};

const SLACK: Duration = Duration::from_secs(5);

/// Creates the user `app` limited to keys and channels under `app:`.
async fn limited_user(server: &distlock_testkit::servers::RedisServer) {
    let created = server
        .command(&[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">app-secret",
            "resetkeys",
            "~app:*",
            "resetchannels",
            "&app:*",
            "+@all",
            "-@dangerous",
        ])
        .await
        .expect("ACL SETUSER");
    assert_eq!(created, RespReply::Simple("OK".into()));
}

fn as_app(
    server: &distlock_testkit::servers::RedisServer,
    prefix: &str,
) -> distlock_redis::RedisConfig {
    config_for(server)
        .with_username("app")
        .with_password("app-secret")
        .with_prefix(prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_limited_to_its_prefix_locks_and_waits_there() {
    let server = start_redis().await;
    limited_user(&server).await;
    let connect = || RedisBackend::connect(as_app(&server, "app:"));
    let (a, b) = (
        connect().await.expect("connect"),
        connect().await.expect("connect"),
    );
    let held = a.lock("jobs").await.expect("lock");
    let waiter = tokio::spawn(async move { b.lock_timeout("jobs", SLACK).await });
    let first = held.token();
    held.release().await.expect("release");
    let next = joined(SLACK, "the waiter is handed the lock", waiter)
        .await
        .expect("the waiter acquires");
    assert!(next.token() > first);
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_limited_to_its_prefix_is_refused_elsewhere() {
    let server = start_redis().await;
    limited_user(&server).await;
    let refused = match RedisBackend::connect(as_app(&server, "other:")).await {
        Err(e) => e,
        Ok(backend) => backend
            .lock("jobs")
            .await
            .expect_err("a lock outside the user's keys must be refused"),
    };
    assert_eq!(refused.kind(), ErrorKind::Unauthorized, "{refused}");
    assert!(!refused.to_string().contains("app-secret"), "{refused}");
}
