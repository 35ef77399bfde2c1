//! A role that may only use the lock tables works once an owner has
//! created them, and a role that may not create them is told so.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackend, LockBackendExt};
use distlock_postgres::ClientConfig;
use distlock_postgres::PostgresBackend;
use support::{client, config_for, start_postgres};

/// The grants the crate docs give for an application role.
const GRANTS: &str = "
    CREATE ROLE distlock_app LOGIN;
    GRANT USAGE ON SCHEMA distlock TO distlock_app;
    GRANT SELECT ON distlock.migrations TO distlock_app;
    GRANT SELECT, INSERT, UPDATE, DELETE ON distlock.entries TO distlock_app;
    GRANT USAGE ON SEQUENCE distlock.tokens, distlock.entries_id_seq TO distlock_app;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_role_needs_only_the_documented_grants() {
    let server = start_postgres().await;
    // The owner (here the superuser) creates the tables once.
    drop(client(&server).await);
    server.query(GRANTS).expect("grant");
    let app = PostgresBackend::connect(
        config_for(&server).with_credentials("distlock_app", "unused-under-trust"),
    )
    .await
    .expect("the application role connects");
    let guard = app.lock("least/privilege").await.expect("lock");
    let status = app
        .inspect(guard.name())
        .await
        .expect("inspect with the same grants");
    assert_eq!(status.holder.map(|h| h.token), Some(guard.token()));
    // A second client of the same role waits, and the release hands over.
    let waiter = PostgresBackend::connect(
        config_for(&server).with_credentials("distlock_app", "unused-under-trust"),
    )
    .await
    .expect("the application role connects");
    let name = guard.name().clone();
    let queued = tokio::spawn(async move { waiter.lock(name.as_str()).await });
    tokio::time::timeout(Duration::from_secs(10), async {
        while app.inspect(guard.name()).await.expect("inspect").waiting != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiter queues with the same grants");
    let first = guard.token();
    guard.release().await.expect("release");
    let next = tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .expect("the waiter gets in")
        .expect("task")
        .expect("lock with the same grants");
    assert!(next.token() > first);
    next.release().await.expect("release");
}

#[tokio::test]
async fn a_role_that_cannot_create_the_tables_is_unauthorized() {
    let server = start_postgres().await;
    server
        .query("CREATE ROLE bystander LOGIN; REVOKE CREATE ON DATABASE postgres FROM PUBLIC;")
        .expect("create the role");
    let err = PostgresBackend::connect(
        config_for(&server).with_credentials("bystander", "unused-under-trust"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(err.to_string().contains("distlock"), "{err}");
}
