//! TLS: a client that trusts the server's CA locks over TLS; one that
//! trusts another CA, or requires TLS of a server without it (by
//! `sslmode` or by giving a TLS file), gets no connection at all. A server that requires client certificates takes a
//! client that presents one (`tls.cert`, `tls.key`) and refuses one that
//! does not.

mod support;

use distlock_core::LockBackendExt;
use distlock_postgres::{PostgresBackend, PostgresConfig};
use distlock_testkit::servers::certs::TestCerts;
use distlock_testkit::servers::{PostgresOptions, PostgresServer};
use support::start_postgres;

async fn tls_server(certs: &TestCerts) -> PostgresServer {
    PostgresServer::start_with(PostgresOptions::new().tls(certs.server_cert(), certs.server_key()))
        .await
        .unwrap_or_else(|e| panic!("cannot start postgres with TLS: {e}"))
}

fn url(server: &PostgresServer, query: &str) -> String {
    format!("{}?{query}", server.url())
}

#[tokio::test]
async fn a_client_trusting_the_servers_ca_locks_over_tls() {
    let certs = TestCerts::generate().expect("certificates");
    let server = tls_server(&certs).await;
    let config = PostgresConfig::from_url(&url(
        &server,
        &format!("sslmode=verify-full&sslrootcert={}", certs.ca().display()),
    ))
    .unwrap();
    let backend = PostgresBackend::connect(config)
        .await
        .expect("connect over TLS");
    let guard = backend.lock("tls/lock").await.expect("lock");
    guard.release().await.expect("release");
    let encrypted = server
        .query("SELECT count(*) FROM pg_stat_ssl WHERE ssl")
        .expect("read pg_stat_ssl");
    assert_ne!(encrypted, "0", "no connection used TLS");
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let certs = TestCerts::generate().expect("certificates");
    let server = tls_server(&certs).await;
    for mode in ["require", "prefer"] {
        let config = PostgresConfig::from_url(&url(
            &server,
            &format!("sslmode={mode}&sslrootcert={}", certs.other_ca().display()),
        ))
        .unwrap();
        let err = PostgresBackend::connect(config).await.unwrap_err();
        assert!(
            err.to_string().to_lowercase().contains("certificate"),
            "{mode}: {err}"
        );
    }
}

#[tokio::test]
async fn requiring_tls_of_a_server_without_it_fails() {
    let server = start_postgres().await;
    let err = PostgresBackend::connect_url(&url(&server, "sslmode=require"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("TLS") || err.to_string().contains("SSL"),
        "{err}"
    );
    // `prefer` falls back to plain text when the server has no TLS.
    PostgresBackend::connect_url(&url(&server, "sslmode=prefer"))
        .await
        .expect("prefer without TLS on the server");
}

/// A TLS setting asks for TLS: a CA to trust or a client certificate,
/// without `sslmode`, never falls back to plain text (a man in the middle
/// could refuse TLS and read the password); `sslmode=prefer`, written
/// out, still does.
#[tokio::test]
async fn a_tls_setting_never_falls_back_to_plain_text() {
    let certs = TestCerts::generate().expect("certificates");
    let server = start_postgres().await;
    let ca = format!("tls.ca={}", certs.ca().display());
    let identity = format!(
        "tls.cert={}&tls.key={}",
        certs.client_cert().display(),
        certs.client_key().display()
    );
    for query in [ca.clone(), identity] {
        let err = PostgresBackend::connect_url(&url(&server, &query))
            .await
            .expect_err("a TLS setting must not connect over plain text");
        assert!(
            err.to_string().contains("TLS") || err.to_string().contains("SSL"),
            "{query}: {err}"
        );
    }
    PostgresBackend::connect_url(&url(&server, &format!("{ca}&sslmode=prefer")))
        .await
        .expect("sslmode=prefer, written out, falls back");
}

#[tokio::test]
async fn a_server_requiring_client_certificates_takes_ours_and_refuses_none() {
    let certs = TestCerts::generate().expect("certificates");
    let server = PostgresServer::start_with(
        PostgresOptions::new()
            .tls(certs.server_cert(), certs.server_key())
            .client_ca(certs.ca()),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start postgres requiring client certificates: {e}"));
    let trust = format!("sslmode=verify-full&tls.ca={}", certs.ca().display());

    let with_cert = format!(
        "{trust}&tls.cert={}&tls.key={}",
        certs.client_cert().display(),
        certs.client_key().display()
    );
    let backend = PostgresBackend::connect_url(&url(&server, &with_cert))
        .await
        .expect("connect with a client certificate");
    let guard = backend.lock("mtls/lock").await.expect("lock");
    assert!(guard.token().get() > 0);
    guard.release().await.expect("release");
    let with_client_cert = server
        .query("SELECT count(*) FROM pg_stat_ssl WHERE ssl AND client_dn IS NOT NULL")
        .expect("read pg_stat_ssl");
    assert_ne!(
        with_client_cert, "0",
        "no connection presented a client certificate"
    );

    let err = PostgresBackend::connect_url(&url(&server, &trust))
        .await
        .expect_err("a client without a certificate must be refused");
    assert!(
        matches!(err.kind(), distlock_core::ErrorKind::Unauthorized),
        "expected Unauthorized, got {:?}: {err}",
        err.kind()
    );
}
