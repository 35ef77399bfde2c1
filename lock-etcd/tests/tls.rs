//! etcd over TLS, end to end with certificates made by the test, and TLS
//! misconfigurations reported as `InvalidConfig` at once.

mod support;

use distlock_etcd::ClientConfig;
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_etcd::{EtcdBackend, EtcdConfig};
use distlock_testkit::servers::certs::TestCerts;
use distlock_testkit::servers::etcd::EtcdTls;
use distlock_testkit::servers::{EtcdCluster, EtcdOptions};
use tokio::time::{Instant, timeout};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A misconfiguration must be reported well before the connect timeout.
const PROMPTLY: Duration = Duration::from_secs(1);

fn certs() -> TestCerts {
    TestCerts::generate().unwrap_or_else(|e| panic!("could not make test certificates: {e}"))
}

async fn tls_cluster(certs: &TestCerts, client_auth: bool) -> EtcdCluster {
    let tls = EtcdTls {
        cert: certs.server_cert(),
        key: certs.server_key(),
        ca: certs.ca(),
        client_ca: client_auth.then(|| certs.ca()),
    };
    match EtcdCluster::start_with(EtcdOptions::new(1).tls(tls)).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start etcd with TLS: {e}"),
    }
}

fn config(endpoints: Vec<String>) -> EtcdConfig {
    support::config_for(endpoints).with_connect_timeout(CONNECT_TIMEOUT)
}

#[tokio::test]
async fn locks_work_over_tls_with_and_without_a_client_certificate() {
    let certs = certs();
    let server_auth = tls_cluster(&certs, false).await;
    let url = format!(
        "etcds://{}{}?tls.ca={}",
        server_auth.endpoints()[0],
        support::PREFIX,
        certs.ca().display()
    );
    let backend = EtcdBackend::connect(EtcdConfig::from_url(&url).expect("url"))
        .await
        .expect("connect over TLS");
    let guard = backend.lock("tls/plain").await.expect("lock over TLS");
    guard.release().await.expect("release over TLS");

    let client_auth = tls_cluster(&certs, true).await;
    let with_identity = config(client_auth.endpoints())
        .with_tls_ca(certs.ca())
        .with_client_identity(certs.client_cert(), certs.client_key());
    let backend = EtcdBackend::connect(with_identity)
        .await
        .expect("connect with a client certificate");
    let guard = backend.lock("tls/client-cert").await.expect("lock");
    guard.release().await.expect("release");
}

async fn refused_promptly(config: EtcdConfig, what: &str) -> distlock_core::Error {
    let start = Instant::now();
    let err = timeout(CONNECT_TIMEOUT * 2, EtcdBackend::connect(config))
        .await
        .unwrap_or_else(|_| panic!("{what}: connect hung"))
        .expect_err(what);
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{what}: {err}");
    assert!(took < PROMPTLY, "{what}: reported after {took:?}: {err}");
    err
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_invalid_config_at_once() {
    let certs = certs();
    let cluster = tls_cluster(&certs, false).await;
    let err = refused_promptly(
        config(cluster.endpoints()).with_tls_ca(certs.other_ca()),
        "a server certificate the CA did not sign",
    )
    .await;
    assert!(err.to_string().contains(&cluster.endpoints()[0]), "{err}");
}

#[tokio::test]
async fn tls_against_a_plaintext_server_is_invalid_config_at_once() {
    let certs = certs();
    let cluster = support::start_cluster(1).await;
    let err = refused_promptly(
        config(cluster.endpoints()).with_tls_ca(certs.ca()),
        "etcds:// against a plaintext server",
    )
    .await;
    assert!(err.to_string().contains(&cluster.endpoints()[0]), "{err}");
}
