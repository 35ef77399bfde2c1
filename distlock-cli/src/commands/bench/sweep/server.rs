//! Request counters read from the server itself, so that renewal traffic is
//! measured where it lands rather than inferred from the client's intent:
//!
//! - Redis: script invocations, the `EVAL*` and `FCALL*` calls of `INFO
//!   commandstats`. Every distlock-redis operation, renewal included, is one
//!   script, and the commands a script runs inside are counted under their
//!   own names (as is `total_commands_processed`), so counting scripts counts
//!   the client's requests rather than the work inside them;
//! - etcd: the sum of `grpc_server_msg_received_total` on `/metrics` of the
//!   client port: one per unary call and one per message on a stream (each
//!   `LeaseKeepAlive` on the keep-alive stream counts once);
//! - ZooKeeper: `zk_packets_received` from the `mntr` four-letter word
//!   (every request and every session ping), less the `mntr` of the
//!   previous reading.
//!
//! Only plain-TCP servers on the URL's first host are read; anything else
//! (TLS, a password, no server at all) has no counter, and the table says so.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one reading may take.
const READ_WITHIN: Duration = Duration::from_secs(5);
/// The most a reply may be: etcd's `/metrics` is a few hundred KiB.
const MAX_REPLY: usize = 16 << 20;

/// Finds the counter in a server's reply.
type Parse = fn(&str) -> Option<u64>;

/// A server whose request counter can be read.
#[derive(Debug, Clone)]
pub(super) struct Counter {
    kind: Kind,
    address: String,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Redis,
    Etcd,
    Zk,
}

impl Counter {
    /// The counter of the server behind `url`, if it has one that can be read.
    pub(super) fn for_url(url: &str) -> Option<Counter> {
        let (scheme, rest) = url.split_once("://")?;
        let (kind, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "redis" => (Kind::Redis, 6379),
            "etcd" => (Kind::Etcd, 2379),
            "zk" => (Kind::Zk, 2181),
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next()?;
        if authority.contains('@') {
            return None;
        }
        let host = authority.split(',').next().filter(|h| !h.is_empty())?;
        let address = if host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        };
        Some(Counter { kind, address })
    }

    /// What is counted, for the table's notes.
    pub(super) fn counts(&self) -> &'static str {
        match self.kind {
            Kind::Redis => "Redis EVAL*/FCALL* calls",
            Kind::Etcd => "etcd grpc_server_msg_received_total",
            Kind::Zk => "ZooKeeper mntr zk_packets_received",
        }
    }

    /// Requests the server has received so far, less this reading's own.
    pub(super) async fn read(&self) -> Result<u64, String> {
        let (request, parse): (&[u8], Parse) = match self.kind {
            Kind::Redis => (b"INFO commandstats\r\nQUIT\r\n", redis_scripts),
            Kind::Etcd => (
                b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n",
                etcd_messages,
            ),
            Kind::Zk => (b"mntr", zk_packets),
        };
        let reply = tokio::time::timeout(READ_WITHIN, self.exchange(request))
            .await
            .map_err(|_| format!("{} did not answer within {READ_WITHIN:?}", self.address))?
            .map_err(|e| format!("{}: {e}", self.address))?;
        parse(&reply).ok_or_else(|| format!("{}: no {} in the reply", self.address, self.counts()))
    }

    /// Sends `request` and reads until the server closes the connection.
    async fn exchange(&self, request: &[u8]) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(&self.address).await?;
        stream.write_all(request).await?;
        let mut reply = Vec::new();
        (&mut stream)
            .take(MAX_REPLY as u64)
            .read_to_end(&mut reply)
            .await?;
        Ok(String::from_utf8_lossy(&reply).into_owned())
    }
}

/// The sum of `calls=N` of every `cmdstat_eval*` and `cmdstat_fcall*` line.
fn redis_scripts(reply: &str) -> Option<u64> {
    reply.contains("# Commandstats").then(|| {
        reply
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter(|l| l.starts_with("eval") || l.starts_with("fcall"))
            .filter_map(|l| {
                l.split_once("calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    })
}

/// The sum of every `grpc_server_msg_received_total{...} N` sample.
fn etcd_messages(reply: &str) -> Option<u64> {
    let samples: Vec<f64> = reply
        .lines()
        .filter(|l| l.starts_with("grpc_server_msg_received_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() as u64)
}

/// `zk_packets_received\tN`, less one: the `mntr` of the previous reading
/// is counted in this one, so a difference of two readings is the clients'.
fn zk_packets(reply: &str) -> Option<u64> {
    let received: u64 = reply
        .lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))?
        .trim()
        .parse()
        .ok()?;
    Some(received.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_plain_host_of_a_url_is_read() {
        let etcd = Counter::for_url("etcd://127.0.0.1:2379,127.0.0.1:2380/x").unwrap();
        assert_eq!(etcd.address, "127.0.0.1:2379");
        assert_eq!(
            Counter::for_url("zk://127.0.0.1").unwrap().address,
            "127.0.0.1:2181"
        );
        assert!(Counter::for_url("redis://:secret@127.0.0.1:6379").is_none());
        assert!(Counter::for_url("rediss://127.0.0.1:6379").is_none());
        assert!(Counter::for_url("memory://").is_none());
    }

    #[test]
    fn replies_are_parsed() {
        let stats = "# Commandstats\r\ncmdstat_evalsha:calls=7,usec=1\r\n\
                     cmdstat_pexpire:calls=9,usec=1\r\ncmdstat_eval:calls=2,usec=3\r\n";
        assert_eq!(redis_scripts(stats), Some(9));
        let metrics = "# HELP x\ngrpc_server_msg_received_total{grpc_method=\"Range\"} 3\n\
                       grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\"} 4\n";
        assert_eq!(etcd_messages(metrics), Some(7));
        assert_eq!(
            zk_packets("zk_version\t3.8\nzk_packets_received\t42\n"),
            Some(41)
        );
    }
}
