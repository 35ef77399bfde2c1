//! A loopback TCP port relayed to a Unix socket: how clients on the host
//! reach a server that runs in a network namespace of its own.

use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::{TcpListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// Forwards every connection to `127.0.0.1:port` to a Unix socket, for as
/// long as it lives. A connection that finds the socket missing (the server
/// is down) is closed at once, as a refused connection would be.
#[derive(Debug)]
pub(crate) struct UnixRelay {
    task: JoinHandle<()>,
}

impl UnixRelay {
    /// Listens on `127.0.0.1:port` and relays to `socket`. Needs a Tokio
    /// runtime; dropping the relay closes the port and every connection.
    pub(crate) async fn start(port: u16, socket: PathBuf) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        Ok(Self {
            task: tokio::spawn(relay(listener, socket)),
        })
    }
}

impl Drop for UnixRelay {
    fn drop(&mut self) {
        // The connection tasks live in the relay task's JoinSet, so they
        // end with it.
        self.task.abort();
    }
}

async fn relay(listener: TcpListener, socket: PathBuf) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else {
            tokio::time::sleep(ACCEPT_PAUSE).await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        let socket = socket.clone();
        connections.spawn(async move {
            let Ok(mut unix) = UnixStream::connect(&socket).await else {
                return;
            };
            let _ = tcp.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
        });
    }
}
