//! What a Redis Cluster needs beyond one server: a client that learns the
//! masters from its seed nodes and routes each command by the slot of its
//! first key, and a way to send a command to one given master (for what
//! must visit every master: `SCAN`, the eviction check).
//!
//! Every key of a lock shares the `{name}` hash tag, so each script call has
//! one slot and goes to one master; the client follows `MOVED` and `ASK`
//! redirections and refreshes its slot map after a failover.

use std::fmt;

use distlock_core::{Error, Result};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, RedisResult, Value};

use crate::config::{CommonConfig, ServerAddr};
use crate::node::{connection_info, tls_files};

/// A cluster client for the `seeds`, with the credentials and TLS settings
/// of `common`.
pub(crate) fn client(
    backend: &'static str,
    seeds: &[ServerAddr],
    common: &CommonConfig,
) -> Result<ClusterClient> {
    let infos = seeds
        .iter()
        .map(|seed| connection_info(backend, seed, common))
        .collect::<Result<Vec<_>>>()?;
    let mut builder = ClusterClient::builder(infos)
        .connection_timeout(common.connect_timeout)
        .response_timeout(common.request_timeout);
    if let Some(certificates) = tls_files(backend, &seeds[0].to_string(), common)? {
        builder = builder.certs(certificates);
    }
    builder.build().map_err(|e| {
        Error::invalid_config(format!(
            "{backend} at {}: cannot configure the cluster client: {e}",
            addrs(seeds)
        ))
    })
}

/// The timeouts of the command connection's links to the nodes.
///
/// The cluster client connects to every seed at once and goes on when all
/// have answered or failed, and it reconnects to a node within a command;
/// every command must finish within the request timeout, so a node gets at
/// most half of it to accept a connection, and a seed that accepts but
/// never answers (a paused node) leaves the command the other half.
pub(crate) fn connection_config(common: &CommonConfig) -> ClusterConfig {
    ClusterConfig::new()
        .set_connection_timeout(common.connect_timeout.min(common.request_timeout / 2))
        .set_response_timeout(common.request_timeout)
}

/// `h1:p1,h2:p2`, for messages.
pub(crate) fn addrs(nodes: &[ServerAddr]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A master of the cluster, as `CLUSTER SLOTS` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Master {
    host: String,
    port: u16,
}

impl fmt::Display for Master {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        ServerAddr::new(self.host.clone(), self.port).fmt(f)
    }
}

/// The masters that own slots now, each once, as one node sees them.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub(crate) async fn masters(conn: &mut ClusterConnection) -> RedisResult<Vec<Master>> {
    let slots: Value = conn
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    // Each range is [start, end, [host, port, id, ...], replicas...].
    let ranges = Vec::<Vec<Value>>::from_redis_value(slots)?;
    let mut masters = Vec::new();
    for range in ranges {
        let Some(node) = range.into_iter().nth(2) else {
            continue;
        };
        let (host, port): (String, u16) = match node {
            Value::Array(mut fields) if fields.len() >= 2 => {
                fields.truncate(2);
                <(String, u16)>::from_redis_value(Value::Array(fields))?
            }
            _ => continue,
        };
        let master = Master { host, port };
        if !masters.contains(&master) {
            masters.push(master);
        }
    }
    Ok(masters)
}

/// Sends `cmd` to `master` itself, whatever keys it names.
///
/// # Cancel safety
///
/// Cancel safe for reads: the command may still run.
pub(crate) async fn on_master<T: FromRedisValue>(
    conn: &mut ClusterConnection,
    master: &Master,
    cmd: &Cmd,
) -> RedisResult<T> {
    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
        host: master.host.clone(),
        port: master.port,
    });
    let reply = conn.route_command(cmd.clone(), route).await?;
    Ok(T::from_redis_value(reply)?)
}
