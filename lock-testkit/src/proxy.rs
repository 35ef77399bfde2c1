//! A TCP fault proxy: put it between a client and a server, then cut,
//! blackhole or slow down the connection while the test runs.
//!
//! Each accepted connection is relayed to the upstream address in both
//! directions. The controls act on live connections at once and on every
//! connection accepted later:
//!
//! - [`FaultProxy::cut`] resets every connection (both sides see `RST`) and
//!   resets new ones right after accepting them, until [`FaultProxy::restore`].
//! - [`FaultProxy::blackhole`] keeps connections open but forwards nothing, like
//!   a network partition where packets vanish: clients see timeouts, not
//!   errors. Bytes already in flight are held (and TCP back-pressure stops the
//!   sender); after [`FaultProxy::restore`] they are delivered, as TCP
//!   retransmission would. New connections are accepted but not connected
//!   upstream until restored.
//! - [`FaultProxy::delay`] adds latency to every chunk in each direction
//!   without limiting throughput.
//!
//! ```no_run
//! # async fn demo(upstream: std::net::SocketAddr) -> std::io::Result<()> {
//! use distlock_testkit::proxy::FaultProxy;
//!
//! let proxy = FaultProxy::start(upstream).await?;
//! // ... point the client at proxy.addr() ...
//! proxy.blackhole(); // the client's session starts timing out
//! proxy.restore();
//! # Ok(())
//! # }
//! ```

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Size of one forwarded chunk.
const CHUNK: usize = 16 * 1024;
/// Chunks buffered per direction (they wait out the delay here).
const IN_FLIGHT: usize = 64;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    Blackhole,
    Cut,
}

/// Settings shared by the proxy handle and its tasks.
#[derive(Debug, Default)]
struct Shared {
    delay_nanos: AtomicU64,
    live: AtomicUsize,
}

/// A running fault proxy; dropping it closes its listener and resets every
/// connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    shared: Arc<Shared>,
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and relays every connection to `upstream`.
    ///
    /// Must be called inside a Tokio runtime; the proxy's tasks run there.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode::Forward);
        let shared = Arc::new(Shared::default());
        let control = Control {
            mode: mode.subscribe(),
            shared: Arc::clone(&shared),
        };
        let accept_task = tokio::spawn(accept_loop(listener, upstream, control));
        Ok(Self {
            addr,
            upstream,
            mode,
            shared,
            accept_task,
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address traffic is relayed to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Resets every connection now and every new one until
    /// [`FaultProxy::restore`]. No byte is forwarded after this returns.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Stops forwarding without closing anything, until
    /// [`FaultProxy::restore`]. No byte is forwarded after this returns.
    pub fn blackhole(&self) {
        self.mode.send_replace(Mode::Blackhole);
    }

    /// Ends a cut or blackhole: traffic flows again (held bytes first). The
    /// delay is left as it is.
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Forward);
    }

    /// Delays every chunk by `delay` in each direction (so a round trip
    /// gains twice `delay`); `Duration::ZERO` removes the delay. Applies to
    /// chunks read from now on.
    pub fn delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.shared.delay_nanos.store(nanos, Ordering::Relaxed);
    }

    /// How many client connections are open through the proxy.
    pub fn connections(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Stops accepting; the mode sender dropping with `self` makes every
        // connection task reset its sockets and end.
        self.accept_task.abort();
    }
}

/// A connection task's view of the proxy settings.
#[derive(Debug, Clone)]
struct Control {
    mode: watch::Receiver<Mode>,
    shared: Arc<Shared>,
}

impl Control {
    fn delay(&self) -> Duration {
        Duration::from_nanos(self.shared.delay_nanos.load(Ordering::Relaxed))
    }

    /// Returns once traffic may flow; fails on a cut or when the proxy is
    /// dropped.
    async fn wait_forwarding(&mut self) -> io::Result<()> {
        loop {
            match *self.mode.borrow_and_update() {
                Mode::Forward => return Ok(()),
                Mode::Cut => {
                    return Err(io::Error::new(io::ErrorKind::ConnectionReset, "proxy cut"));
                }
                Mode::Blackhole => {}
            }
            if self.mode.changed().await.is_err() {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "proxy dropped",
                ));
            }
        }
    }

    /// Returns on a cut or when the proxy is dropped.
    async fn cut_or_dropped(&mut self) {
        let _ = self.mode.wait_for(|mode| *mode == Mode::Cut).await;
    }
}

/// Counts a live client connection while it exists.
struct LiveConnection(Arc<Shared>);

impl LiveConnection {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.live.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(shared))
    }
}

impl Drop for LiveConnection {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, control: Control) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // e.g. out of file descriptors: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if *control.mode.borrow() == Mode::Cut {
            reset(&client);
            continue;
        }
        tokio::spawn(serve(client, upstream, control.clone()));
    }
}

/// Relays one client connection until both sides finish, or resets both
/// sides on a cut, an error, or when the proxy is dropped.
async fn serve(mut client: TcpStream, upstream: SocketAddr, mut control: Control) {
    let _live = LiveConnection::new(&control.shared);
    // A partitioned network would not complete the upstream handshake yet.
    if control.wait_forwarding().await.is_err() {
        reset(&client);
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let finished_cleanly = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let relay = async {
            tokio::try_join!(
                pump(client_read, server_write, control.clone()),
                pump(server_read, client_write, control.clone()),
            )
        };
        let mut watcher = control.clone();
        tokio::select! {
            result = relay => result.is_ok(),
            () = watcher.cut_or_dropped() => false,
        }
    };
    if !finished_cleanly {
        reset(&client);
        reset(&server);
    }
}

/// Forwards one direction: reads chunks as they come, delivers each after
/// the delay, holds everything while blackholed, and half-closes `dst` when
/// `src` ends.
async fn pump(mut src: ReadHalf<'_>, mut dst: WriteHalf<'_>, control: Control) -> io::Result<()> {
    let (chunks, mut due) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let mut read_control = control.clone();
    let reader = async move {
        let mut buf = vec![0; CHUNK];
        loop {
            read_control.wait_forwarding().await?;
            let n = src.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, io::Error>(());
            }
            let deliver_at = Instant::now() + read_control.delay();
            if chunks.send((deliver_at, buf[..n].to_vec())).await.is_err() {
                return Ok(());
            }
        }
    };
    let mut write_control = control;
    let writer = async move {
        while let Some((deliver_at, chunk)) = due.recv().await {
            tokio::time::sleep_until(deliver_at).await;
            write_control.wait_forwarding().await?;
            dst.write_all(&chunk).await?;
        }
        dst.shutdown().await
    };
    tokio::try_join!(reader, writer).map(|_| ())
}

/// Closes with `RST` instead of `FIN` once the stream is dropped.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}
