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

/// Makes a CA and a server certificate for localhost/127.0.0.1, then
/// starts Redis with TLS on a free port and waits until it accepts.
async fn start_tls_redis() -> TlsRedis {
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
    run(
        d,
        "openssl",
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    run(
        d,
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ],
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
        .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no"])
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
/// it is refused; `#insecure` skips verification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_locks_with_a_trusted_ca_and_rejects_an_unknown_one() {
    let server = start_tls_redis().await;
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
    let client = RedisBackend::connect_url(&insecure)
        .await
        .expect("insecure TLS");
    support::lock_and_release(&client, "tls/insecure").await;

    let plain = format!("redis://localhost:{}?connect_timeout=1s", server.port);
    distlock_testkit::assert::fails_with_one_of(
        &[ErrorKind::Unavailable, ErrorKind::Timeout],
        "plain text to a TLS port",
        RedisBackend::connect_url(&plain).await,
    );
}
