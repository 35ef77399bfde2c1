//! A minimal HTTP/1.0 client for etcd's health and JSON gateway endpoints.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An HTTP response: status code and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: String,
}

/// Sends one HTTP/1.0 request to `addr` and reads the whole response (the
/// server closes the connection after an HTTP/1.0 response).
pub(crate) async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> io::Result<Response> {
    let mut stream = TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse(&String::from_utf8_lossy(&raw))
}

fn parse(raw: &str) -> io::Result<Response> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad HTTP response: {raw:?}"),
        )
    };
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(invalid)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(invalid)?;
    Ok(Response {
        status,
        body: body.to_owned(),
    })
}
