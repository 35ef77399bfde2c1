//! The launcher's server, and the backend across its failures: a kill and
//! restart keeps what was committed (tokens go on rising), a pause freezes
//! every connection, and the backend reconnects by itself.

mod support;

use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use support::{TTL, client, start_postgres};

const SLACK: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_rising_across_a_server_restart() {
    let server = start_postgres().await;
    let backend = client(&server).await;
    let before = backend.lock("server/restart").await.expect("lock");
    let token = before.token();
    before.release().await.expect("release");
    server.restart().await.expect("restart");
    // The backend's connections died with the server; it reconnects. A
    // release commits without waiting for the WAL flush, so the kill may
    // have lost it: the row is back, and the lock comes free when its lease
    // ends (TTL), not at once.
    let after = tokio::time::timeout(SLACK + TTL, async {
        loop {
            match backend.try_lock("server/restart").await {
                Ok(guard) => return guard,
                Err(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::WouldBlock) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("after the restart: {e}"),
            }
        }
    })
    .await
    .expect("the backend reconnects");
    assert!(after.token() > token, "{} after {token}", after.token());
    after.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_answers_nothing_until_resumed() {
    let server = start_postgres().await;
    let backend = client(&server).await;
    server.pause();
    assert!(server.is_paused());
    let err = backend.try_lock("server/paused").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    server.resume();
    let guard = tokio::time::timeout(SLACK, async {
        loop {
            match backend.try_lock("server/paused").await {
                Ok(guard) => return guard,
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("after resuming: {e}"),
            }
        }
    })
    .await
    .expect("served again");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_missing_install_would_name_the_install_script() {
    let err = distlock_testkit::servers::PostgresServer::start_with(
        distlock_testkit::servers::PostgresOptions::new().bin_dir("/nonexistent/postgres/bin"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("scripts/install-servers.sh"),
        "{err}"
    );
}
