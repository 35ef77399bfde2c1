//! The fault proxy relays bytes, adds latency, cuts and blackholes
//! connections, and recovers on restore. An echo server stands upstream.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use distlock_testkit::proxy::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long a read may block before we call the connection stalled.
const STALL: Duration = Duration::from_millis(300);
/// A generous bound for things that should happen promptly.
const PROMPTLY: Duration = Duration::from_secs(5);

/// An echo server on a loopback port; aborted when dropped.
struct Echo {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Echo {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
        let addr = listener.local_addr().expect("echo addr");
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = conn.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        Self { addr, task }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn proxied_echo() -> (Echo, FaultProxy) {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    (echo, proxy)
}

/// A connection through `proxy` that has carried `message` both ways, so
/// the proxy has the connection up before a fault is applied.
async fn echoing(proxy: &FaultProxy, message: &[u8]) -> TcpStream {
    let mut conn = TcpStream::connect(proxy.addr()).await.expect("connect");
    round_trip(&mut conn, message).await.expect("echo");
    conn
}

/// Sends `message` and reads the same number of bytes back.
async fn round_trip(conn: &mut TcpStream, message: &[u8]) -> std::io::Result<Vec<u8>> {
    conn.write_all(message).await?;
    let mut reply = vec![0; message.len()];
    conn.read_exact(&mut reply).await?;
    Ok(reply)
}

/// Reads `expected` from `conn` within [`PROMPTLY`]; `what` says why it
/// should arrive.
async fn arrives(conn: &mut TcpStream, expected: &[u8], what: &str) {
    let mut got = vec![0; expected.len()];
    tokio::time::timeout(PROMPTLY, conn.read_exact(&mut got))
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
        .unwrap_or_else(|e| panic!("read: {what}: {e}"));
    assert_eq!(got, expected, "{what}");
}

/// True if the connection is closed or reset: a read gives EOF or an error.
async fn is_closed(conn: &mut TcpStream) -> bool {
    let mut byte = [0; 1];
    match tokio::time::timeout(PROMPTLY, conn.read(&mut byte)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PROMPTLY;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn bytes_pass_both_ways() {
    let (echo, proxy) = proxied_echo().await;
    assert_eq!(proxy.upstream(), echo.addr);
    let mut conn = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(
        round_trip(&mut conn, b"hello").await.expect("echo"),
        b"hello"
    );
    let big = vec![7u8; 1 << 20];
    assert_eq!(round_trip(&mut conn, &big).await.expect("echo 1 MiB"), big);
    eventually("one live connection", || async { proxy.connections() == 1 }).await;
    drop(conn);
    eventually("no live connections", || async { proxy.connections() == 0 }).await;
}

#[tokio::test]
async fn delay_adds_latency_each_way() {
    let (_echo, proxy) = proxied_echo().await;
    let mut conn = echoing(&proxy, b"warm").await;

    let delay = Duration::from_millis(150);
    proxy.delay(delay);
    let started = Instant::now();
    round_trip(&mut conn, b"slow").await.expect("delayed echo");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= 2 * delay,
        "round trip took {elapsed:?}, expected at least {:?}",
        2 * delay
    );
    assert!(
        elapsed < 2 * delay + PROMPTLY,
        "round trip took {elapsed:?}"
    );

    proxy.delay(Duration::ZERO);
    let started = Instant::now();
    round_trip(&mut conn, b"fast").await.expect("echo");
    assert!(
        started.elapsed() < delay,
        "delay still applied: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn cut_closes_connections_until_restored() {
    let (_echo, proxy) = proxied_echo().await;
    let mut conn = echoing(&proxy, b"before").await;

    proxy.cut();
    assert!(is_closed(&mut conn).await, "live connection survived a cut");
    eventually("no live connections", || async { proxy.connections() == 0 }).await;

    // New connections are accepted by the kernel, then reset at once.
    if let Ok(mut fresh) = TcpStream::connect(proxy.addr()).await {
        let _ = fresh.write_all(b"anyone?").await;
        assert!(is_closed(&mut fresh).await, "new connection survived a cut");
    }

    proxy.restore();
    let mut conn = TcpStream::connect(proxy.addr())
        .await
        .expect("connect after restore");
    assert_eq!(
        round_trip(&mut conn, b"after").await.expect("echo"),
        b"after"
    );
}

#[tokio::test]
async fn blackhole_holds_bytes_until_restored() {
    let (_echo, proxy) = proxied_echo().await;
    let mut conn = echoing(&proxy, b"before").await;

    proxy.blackhole();
    let stalled = tokio::time::timeout(STALL, round_trip(&mut conn, b"lost?")).await;
    assert!(stalled.is_err(), "bytes crossed a blackhole: {stalled:?}");
    assert_eq!(
        proxy.connections(),
        1,
        "blackhole must keep connections open"
    );

    // A new connection is accepted but nothing crosses either.
    let mut fresh = TcpStream::connect(proxy.addr())
        .await
        .expect("connect during blackhole");
    let stalled = tokio::time::timeout(STALL, round_trip(&mut fresh, b"hello?")).await;
    assert!(
        stalled.is_err(),
        "bytes crossed a blackhole on a new connection"
    );

    proxy.restore();
    arrives(&mut conn, b"lost?", "held bytes delivered after restore").await;
    assert_eq!(
        round_trip(&mut conn, b"after").await.expect("echo"),
        b"after"
    );
    arrives(&mut fresh, b"hello?", "new connection flows after restore").await;
}

#[tokio::test]
async fn dropping_the_proxy_closes_its_connections() {
    let (_echo, proxy) = proxied_echo().await;
    let addr = proxy.addr();
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    round_trip(&mut conn, b"ping").await.expect("echo");
    drop(proxy);
    assert!(is_closed(&mut conn).await, "connection outlived the proxy");
    let refused = tokio::time::timeout(PROMPTLY, TcpStream::connect(addr)).await;
    assert!(
        matches!(refused, Ok(Err(_))),
        "proxy still accepts after drop"
    );
}
