//! Bad input fails with a typed error naming what is wrong, within its
//! bound, and never shows the password.

mod support;

use distlock_mysql::ClientConfig;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, ErrorKind, LockBackend, LockName};
use distlock_mysql::{Layout, MysqlBackend, MysqlConfig};
use distlock_testkit::servers::mariadb::{TEST_DATABASE, TEST_USER};
use support::{client, config_for, named_client, start_mariadb};

#[tokio::test]
async fn a_wrong_password_is_unauthorized_and_never_shown() {
    let server = start_mariadb().await;
    let url = format!(
        "mysql://{TEST_USER}:wrong-battery@{}/{TEST_DATABASE}",
        server.addr()
    );
    for layout in ["table", "named"] {
        let err = MysqlBackend::connect_url(&format!("{url}?layout={layout}"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{layout}: {err}");
        assert!(!err.to_string().contains("wrong-battery"), "{err}");
        assert!(!format!("{err:?}").contains("wrong-battery"), "{err:?}");
    }
    // The right one gets in.
    MysqlBackend::connect_url(&server.url())
        .await
        .expect("the right password");
}

#[tokio::test]
async fn a_missing_database_is_invalid_config_naming_it() {
    let server = start_mariadb().await;
    // A database the user may use but that does not exist.
    let config = config_for(&server).with_database("distlock_no_such_db");
    let err = MysqlBackend::connect(config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("distlock_no_such_db"), "{err}");
    // One it may not use: the server does not say whether it exists.
    let config = config_for(&server).with_database("elsewhere");
    let err = MysqlBackend::connect(config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(err.to_string().contains("may not exist"), "{err}");
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
    for layout in [Layout::Table, Layout::Named] {
        let config = MysqlConfig::new("127.0.0.1", port)
            .with_database("db")
            .with_layout(layout)
            .with_connect_timeout(bound);
        let started = Instant::now();
        let err = MysqlBackend::connect(config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.is_retryable(), "{err}");
        assert!(
            started.elapsed() < bound * 2 + Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
    }
    keep.abort();
}

#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = MysqlBackend::connect(MysqlConfig::new("127.0.0.1", port).with_database("db"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn too_small_a_ttl_is_invalid_config() {
    for url in ["mysql://h/db?ttl=0s", "mysql://h/db?ttl=50ms"] {
        let err = MysqlConfig::from_url(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
    }
    let server = start_mariadb().await;
    let name = LockName::new("bad/ttl").unwrap();
    for backend in [client(&server).await, named_client(&server).await] {
        for ttl in [Duration::ZERO, Duration::from_millis(50)] {
            let err = backend
                .acquire(&name, &AcquireOptions::new().ttl(ttl))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{ttl:?}: {err}");
        }
    }
}

#[tokio::test]
async fn names_empty_or_too_long_for_the_layout_are_invalid_name() {
    assert_eq!(
        LockName::new("").unwrap_err().kind(),
        ErrorKind::InvalidName
    );
    let server = start_mariadb().await;
    // The table layout holds keys of 1024 bytes, prefix included.
    let long_prefix = "p".repeat(600);
    let backend = MysqlBackend::connect(config_for(&server).with_prefix(long_prefix))
        .await
        .expect("connect");
    let name = LockName::new("n".repeat(500)).unwrap();
    let started = Instant::now();
    let err = backend
        .acquire(&name, &AcquireOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // The named layout hashes names past 64 characters: they still lock.
    let named = named_client(&server).await;
    let guard = named
        .acquire(&name, &AcquireOptions::new())
        .await
        .expect("lock");
    assert_eq!(support::named_lock(&guard).chars().count(), 64);
    guard.release().await.expect("release");
}

/// A CA file asks for TLS: given without `ssl_mode`, against a server
/// without TLS, it never falls back to plain text (a man in the middle
/// could refuse TLS and read the password); `ssl_mode=disabled` beside it
/// is refused as a contradiction.
#[tokio::test]
async fn a_ca_file_never_falls_back_to_plain_text() {
    let certs = distlock_testkit::servers::certs::TestCerts::generate().expect("certificates");
    let server = start_mariadb().await;
    let ca = format!("tls.ca={}", certs.ca().display());
    let err = MysqlBackend::connect_url(&format!("{}?{ca}", server.url()))
        .await
        .expect_err("a CA file must not connect over plain text");
    assert!(
        err.to_string().contains("TLS") || err.to_string().to_lowercase().contains("ssl"),
        "{err}"
    );
    let err = MysqlBackend::connect_url(&format!("{}?{ca}&ssl_mode=disabled", server.url()))
        .await
        .expect_err("ssl_mode=disabled contradicts a CA file");
    assert_eq!(err.kind(), distlock_core::ErrorKind::InvalidConfig, "{err}");
}
