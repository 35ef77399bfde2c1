//! Bad input fails with a typed error naming what is wrong, within its
//! bound, and never shows the password.

mod support;

use distlock_postgres::ClientConfig;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, ErrorKind, LockBackend, LockName};
use distlock_postgres::{PostgresBackend, PostgresConfig};
use distlock_testkit::servers::PostgresServer;
use support::{client, config_for, start_postgres};

#[tokio::test]
async fn a_wrong_password_is_unauthorized_and_never_shown() {
    let server = PostgresServer::start_with_password("right-horse")
        .await
        .unwrap_or_else(|e| panic!("cannot start postgres: {e}"));
    let url = format!(
        "postgres://postgres:wrong-battery@{}/postgres",
        server.addr()
    );
    let err = PostgresBackend::connect_url(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(!err.to_string().contains("wrong-battery"), "{err}");
    assert!(!format!("{err:?}").contains("wrong-battery"), "{err:?}");
    // The right one gets in.
    PostgresBackend::connect_url(&server.authenticated_url())
        .await
        .expect("the right password");
}

#[tokio::test]
async fn a_missing_database_is_invalid_config_naming_it() {
    let server = start_postgres().await;
    let config = config_for(&server).with_database("no_such_db");
    let err = PostgresBackend::connect(config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("no_such_db"), "{err}");
}

#[tokio::test]
async fn a_server_that_never_answers_fails_within_the_connect_timeout() {
    // Accepts connections and says nothing, as a hung server would.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let bound = Duration::from_millis(500);
    let config = PostgresConfig::new("127.0.0.1", port).with_connect_timeout(bound);
    let started = Instant::now();
    let err = PostgresBackend::connect(config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < bound + Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    keep.abort();
}

#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = PostgresBackend::connect(PostgresConfig::new("127.0.0.1", port))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn too_small_a_ttl_is_invalid_config() {
    for url in ["postgres://h/db?ttl=0s", "postgres://h/db?ttl=50ms"] {
        let err = PostgresConfig::from_url(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
    }
    let server = start_postgres().await;
    let backend = client(&server).await;
    let name = LockName::new("bad/ttl").unwrap();
    for ttl in [Duration::ZERO, Duration::from_millis(50)] {
        let err = backend
            .acquire(&name, &AcquireOptions::new().ttl(ttl))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{ttl:?}: {err}");
    }
}
