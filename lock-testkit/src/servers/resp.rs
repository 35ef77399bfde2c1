//! A minimal RESP2 client: send one command, read one reply.

use std::fmt;
use std::io;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One Redis reply.
///
/// `Display` prints the raw reply text: the string of a simple, bulk or
/// error reply, the digits of an integer, `(nil)` for a null, and the
/// elements of an array one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespReply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`, with the leading `-` removed (e.g. `NOAUTH Authentication required.`).
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$5 hello`, or `None` for the null bulk string.
    Bulk(Option<String>),
    /// `*2 ...`, or `None` for the null array.
    Array(Option<Vec<RespReply>>),
}

impl RespReply {
    /// Whether the server answered with an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }

    /// Whether the reply is a null bulk string or null array.
    pub fn is_nil(&self) -> bool {
        matches!(self, Self::Bulk(None) | Self::Array(None))
    }

    /// The text of a simple or non-null bulk string reply.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Simple(text) | Self::Bulk(Some(text)) => Some(text),
            _ => None,
        }
    }
}

impl fmt::Display for RespReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Simple(text) | Self::Error(text) | Self::Bulk(Some(text)) => f.write_str(text),
            Self::Integer(n) => write!(f, "{n}"),
            Self::Bulk(None) | Self::Array(None) => f.write_str("(nil)"),
            Self::Array(Some(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// Connects to `addr`, authenticates with `password` if given, sends one
/// command and returns its reply. A failed `AUTH` returns the `AUTH` reply.
pub(crate) async fn command(
    addr: &str,
    password: Option<&str>,
    args: &[&str],
) -> io::Result<RespReply> {
    let mut conn = BufReader::new(TcpStream::connect(addr).await?);
    if let Some(password) = password {
        let auth = round_trip(&mut conn, &["AUTH", password]).await?;
        if auth.is_error() {
            return Ok(auth);
        }
    }
    round_trip(&mut conn, args).await
}

async fn round_trip(conn: &mut BufReader<TcpStream>, args: &[&str]) -> io::Result<RespReply> {
    let mut frame = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        frame.extend_from_slice(arg.as_bytes());
        frame.extend_from_slice(b"\r\n");
    }
    conn.get_mut().write_all(&frame).await?;
    read_reply(conn).await
}

async fn read_reply(conn: &mut BufReader<TcpStream>) -> io::Result<RespReply> {
    let line = read_line(conn).await?;
    let (kind, rest) = line.split_at(1.min(line.len()));
    match kind {
        "+" => Ok(RespReply::Simple(rest.to_owned())),
        "-" => Ok(RespReply::Error(rest.to_owned())),
        ":" => Ok(RespReply::Integer(parse_int(rest)?)),
        "$" => match usize::try_from(parse_int(rest)?) {
            Err(_) => Ok(RespReply::Bulk(None)),
            Ok(len) => {
                let mut data = vec![0; len + 2];
                conn.read_exact(&mut data).await?;
                data.truncate(len);
                Ok(RespReply::Bulk(Some(
                    String::from_utf8_lossy(&data).into_owned(),
                )))
            }
        },
        "*" => match usize::try_from(parse_int(rest)?) {
            Err(_) => Ok(RespReply::Array(None)),
            Ok(len) => {
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(Box::pin(read_reply(conn)).await?);
                }
                Ok(RespReply::Array(Some(items)))
            }
        },
        _ => Err(invalid(format!("unexpected RESP line {line:?}"))),
    }
}

async fn read_line(conn: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut line = Vec::new();
    if conn.read_until(b'\n', &mut line).await? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    let text = String::from_utf8_lossy(&line);
    Ok(text.trim_end_matches(['\r', '\n']).to_owned())
}

fn parse_int(text: &str) -> io::Result<i64> {
    text.parse()
        .map_err(|_| invalid(format!("bad RESP integer {text:?}")))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}
