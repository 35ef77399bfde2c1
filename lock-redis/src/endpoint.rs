//! Where a node's commands go: one server behind a self-healing connection,
//! or a Redis Cluster whose client routes each command to the master of its
//! key's slot. Everything above (scripts, scans, the eviction check) is
//! written once against [`Endpoint`].

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, FromRedisValue, RedisResult, Script, ServerErrorKind};

use crate::cluster::{self, Master};
use crate::scripts::SCRIPTS;

/// The clients and the command connection of one server or one cluster.
#[allow(
    clippy::large_enum_variant,
    reason = "one per backend instance, behind an Arc: boxing would save nothing"
)]
pub(crate) enum Endpoint {
    /// One server.
    Server {
        client: Client,
        conn: ConnectionManager,
    },
    /// A Redis Cluster, reached through its seed nodes.
    Cluster {
        client: ClusterClient,
        conn: ClusterConnection,
    },
}

impl Endpoint {
    /// Sends `cmd`: to `at` when given (a cluster's master), else where its
    /// key routes it (the one server, or the master of the key's slot).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe for the caller; a command already sent may still run.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        at: Option<&Master>,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match (self, at) {
            (Endpoint::Server { conn, .. }, _) => cmd.query_async(&mut conn.clone()).await,
            (Endpoint::Cluster { conn, .. }, None) => cmd.query_async(&mut conn.clone()).await,
            (Endpoint::Cluster { conn, .. }, Some(master)) => {
                cluster::on_master(&mut conn.clone(), master, cmd).await
            }
        }
    }

    /// Where keys live: one `None` for a server (itself), else every master
    /// of the cluster now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub(crate) async fn masters(&self) -> RedisResult<Vec<Option<Master>>> {
        match self {
            Endpoint::Server { .. } => Ok(vec![None]),
            Endpoint::Cluster { conn, .. } => Ok(cluster::masters(&mut conn.clone())
                .await?
                .into_iter()
                .map(Some)
                .collect()),
        }
    }
}

/// One script call: `EVALSHA`, then, if the server does not have the script
/// cached (it restarted, or is a replica promoted since the script was
/// loaded), `EVAL` with the source, which also caches it there. The `EVAL`
/// goes to the same slot's master as the `EVALSHA`, unlike a `SCRIPT LOAD`,
/// which has no key to route it by. It is built only when needed: copying a
/// script's source into every call cost the uncontended path measurably.
pub(crate) struct ScriptCall<'s> {
    cached: Cmd,
    source: &'s str,
}

impl ScriptCall<'static> {
    /// The call of `script`, one of ours, with `keys` and `args`.
    pub(crate) fn new(script: &Script, keys: &[&str], args: &[&[u8]]) -> ScriptCall<'static> {
        ScriptCall::with_source(script, SCRIPTS.source(script), keys, args)
    }
}

impl<'s> ScriptCall<'s> {
    /// The call of `script`, whose source is `source`, with `keys` and
    /// `args`: for scripts built at run time (guarded writes).
    pub(crate) fn with_source(
        script: &Script,
        source: &'s str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> ScriptCall<'s> {
        let mut cached = redis::cmd("EVALSHA");
        cached
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        ScriptCall { cached, source }
    }

    /// The same call as `EVAL` with the script's source.
    fn full(&self) -> Cmd {
        let mut full = redis::cmd("EVAL");
        full.arg(self.source);
        // Past the command name and the hash: the key count, keys and args.
        for arg in self.cached.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                full.arg(bytes);
            }
        }
        full
    }

    /// Runs the call on `endpoint`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have run.
    pub(crate) async fn run<T: FromRedisValue>(&self, endpoint: &Endpoint) -> RedisResult<T> {
        match endpoint.query(None, &self.cached).await {
            Err(e) if is_noscript(&e) => endpoint.query(None, &self.full()).await,
            result => result,
        }
    }

    /// Runs the call on a blocking connection.
    pub(crate) fn run_blocking<T: FromRedisValue>(
        &self,
        conn: &mut dyn redis::ConnectionLike,
    ) -> RedisResult<T> {
        match self.cached.query(conn) {
            Err(e) if is_noscript(&e) => self.full().query(conn),
            result => result,
        }
    }
}

fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
}
