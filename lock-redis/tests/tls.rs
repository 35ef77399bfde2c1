//! `rediss://` against a real Redis serving TLS with a throw-away CA made by
//! the `openssl` command line tool.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_redis::RedisBackend;
use distlock_testkit::assert::within;

/// A `redis-server` child serving TLS only; killed on drop.
struct TlsRedis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(dir: &Path, program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}); install it: scripts/install-servers.sh installs redis-server, and the Debian package openssl provides openssl")
        });
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Makes a certificate `name.crt` (with key `name.key`) for `subject`,
/// signed by the test CA in `dir`.
fn signed_certificate(dir: &Path, name: &str, subject: &str, extensions: &[&str]) {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    run(
        dir,
        "openssl",
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    );
    let mut sign = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "1",
    ];
    sign.extend_from_slice(extensions);
    run(dir, "openssl", &sign);
}

/// Makes a CA, a server certificate for localhost/127.0.0.1 and a client
/// certificate, then starts Redis with TLS on a free port (asking clients
/// for a certificate if `auth_clients`) and waits until it accepts.
async fn start_tls_redis(auth_clients: bool) -> TlsRedis {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    run(
        d,
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=distlock test CA",
        ],
    );
    signed_certificate(d, "server", "/CN=localhost", &["-extfile", "san.ext"]);
    // An extension makes it X.509 v3, the only version rustls takes.
    std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    signed_certificate(
        d,
        "client",
        "/CN=distlock test client",
        &["-extfile", "client.ext"],
    );
    let port = support::free_port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
        ])
        .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients"])
        .arg(if auth_clients { "yes" } else { "no" })
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(d)
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}); run scripts/install-servers.sh")
        });
    let server = TlsRedis {
        child,
        port,
        _dir: dir,
    };
    within(Duration::from_secs(10), "TLS redis accepting", async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    server
}

/// A client that trusts the test CA locks over TLS; one that does not trust
/// it is refused; `#insecure` skips verification (in builds that have it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_locks_with_a_trusted_ca_and_rejects_an_unknown_one() {
    let server = start_tls_redis(false).await;
    let ca = server._dir.path().join("ca.crt");
    let url = format!(
        "rediss://localhost:{}?tls.ca={}&connect_timeout=3s",
        server.port,
        ca.display()
    );
    let client = RedisBackend::connect_url(&url).await.expect("TLS connect");
    let guard = client.lock("tls/lock").await.expect("lock over TLS");
    let other = RedisBackend::connect_url(&url).await.expect("TLS connect");
    let err = other.try_lock("tls/lock").await.expect_err("held");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    guard.release().await.expect("release over TLS");

    let untrusted = format!("rediss://localhost:{}?connect_timeout=2s", server.port);
    let err = within(
        Duration::from_secs(5),
        "untrusted certificate",
        RedisBackend::connect_url(&untrusted),
    )
    .await
    .expect_err("certificate of an unknown CA");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

    let insecure = format!("rediss://localhost:{}#insecure", server.port);
    if cfg!(feature = "insecure-tls") {
        let client = RedisBackend::connect_url(&insecure)
            .await
            .expect("insecure TLS");
        support::lock_and_release(&client, "tls/insecure").await;
    } else {
        let err = RedisBackend::connect_url(&insecure)
            .await
            .expect_err("not compiled in");
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }

    let plain = format!("redis://localhost:{}?connect_timeout=1s", server.port);
    distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::Unavailable, ErrorKind::Timeout],
        "plain text to a TLS port",
        RedisBackend::connect_url(&plain).await,
    );
}

/// A server that authenticates clients (`tls-auth-clients yes`) takes a
/// client with the test CA's client certificate and refuses one without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_authenticates_clients_takes_a_client_certificate() {
    let server = start_tls_redis(true).await;
    let d = server._dir.path();
    let url = |extra: &str| {
        format!(
            "rediss://localhost:{}?tls.ca={}&connect_timeout=3s{extra}",
            server.port,
            d.join("ca.crt").display()
        )
    };
    let with_certificate = url(&format!(
        "&tls.cert={}&tls.key={}",
        d.join("client.crt").display(),
        d.join("client.key").display()
    ));
    let client = RedisBackend::connect_url(&with_certificate)
        .await
        .expect("TLS connect with a client certificate");
    support::lock_and_release(&client, "tls/client-certificate").await;

    let without = within(
        Duration::from_secs(10),
        "a client without a certificate",
        RedisBackend::connect_url(&url("")),
    )
    .await
    .expect_err("the server asks for a client certificate");
    assert!(
        matches!(
            without.kind(),
            ErrorKind::Unavailable | ErrorKind::Unauthorized
        ),
        "{without}"
    );

    let missing = url("&tls.cert=/nonexistent/client.crt&tls.key=/nonexistent/client.key");
    let err = RedisBackend::connect_url(&missing)
        .await
        .expect_err("no such file");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("tls.cert"), "{err}");
}
