//! The public backends: [`RedisBackend`] (one server), [`RedisClusterBackend`]
//! (a Redis Cluster) and [`RedlockBackend`] (a majority of N independent
//! servers).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::AdminCapabilities;
use distlock_core::{
    Access, AcquireRequest, Candidacy, Capabilities, ElectionBackend, FencingStrength, HolderInfo,
    LeaderInfo, LeaderStream, Leadership, ListOptions, ListPage, LockBackend, LockGuard, LockName,
    LockStatus, Result,
};

use crate::cluster_config::RedisClusterConfig;
use crate::config::{RedisConfig, RedlockConfig};
use crate::election;
use crate::keys::Space;
use crate::servers::{Mode, Servers};

fn capabilities(servers: &Servers) -> Capabilities {
    if servers.layout == crate::Layout::Plain {
        return plain_capabilities(servers);
    }
    // Tokens are best effort: they come from a counter in Redis memory. The
    // counter is seeded from the server clock, so a restart that lost it
    // still continues upwards, but an asynchronous replica promoted after a
    // failover (a Redis Cluster's, or a single server's under Sentinel) may
    // hand out a token again. A cluster is one node here: each lock's keys
    // live on one master, with one queue, as on a single server.
    Capabilities::new(servers.backend, FencingStrength::BestEffort)
        // The wait queue only exists on one node, and only in the fair
        // mode; Redlock waiters and non-fair (`fair=false`) ones race.
        .with_fifo(servers.fair)
        .with_election(true)
        // Semaphores and read-write locks need the one queue and holder set
        // a single server keeps; see the crate docs for why Redlock has
        // none, even over one server (`RedlockBackend` refuses them).
        .with_shared(servers.mode.is_one_node(), servers.mode.is_one_node())
        .with_ttl_limits(distlock_core::MIN_TTL, Duration::from_millis(1))
        // A script on the lock's server checks owner and token and writes;
        // Redlock's majority cannot be checked by one server.
        .with_guarded_writes(servers.mode.is_one_node())
        // Every grant stores its holder record (description, token, grant
        // time by the server clock) beside the owner key, and waiters their
        // descriptions; the lease left is the key's PTTL.
        .with_admin(AdminCapabilities::all())
}

/// The plain layout: locks only, not FIFO (waiters poll), tokens from the
/// server clock, and an operator's view of what the one key shows.
fn plain_capabilities(servers: &Servers) -> Capabilities {
    // Waiters are counted, not described: a waiter stores only its id. The
    // grant time is the token (server time), where distlock wrote the value.
    let mut admin = AdminCapabilities::all().with_waiters(false);
    // Lock keys are bare names among the application's keys.
    admin.list = false;
    Capabilities::new(servers.backend, FencingStrength::BestEffort)
        .with_ttl_limits(distlock_core::MIN_TTL, Duration::from_millis(1))
        .with_admin(admin)
}

/// A lock service on one Redis server (`redis://` or `rediss://`).
///
/// Clones share the connections. See the [crate documentation](crate) for
/// the algorithm, the costs and the failure behaviour.
#[derive(Clone)]
pub struct RedisBackend {
    servers: Arc<Servers>,
    config: Arc<RedisConfig>,
}

impl RedisBackend {
    /// Connects, authenticates and subscribes to this instance's wake-up
    /// channel.
    ///
    /// Fails within `connect_timeout` with `Unavailable` (unreachable),
    /// `Unauthorized` (wrong credentials) or `InvalidConfig` (a bad setting
    /// or database number), each naming the address.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future closes whatever was opened.
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        let servers = Servers::connect(
            Mode::Single,
            std::slice::from_ref(&config.server),
            &config.common,
        )
        .await?;
        Ok(RedisBackend {
            servers,
            config: Arc::new(config),
        })
    }

    /// Connects to the server of a `redis://` or `rediss://` URL.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(RedisConfig::from_url(url)?).await
    }

    /// The configuration this backend was connected with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }
}

/// A lock service on a Redis Cluster (`redis+cluster://h1:p1,h2:p2`).
///
/// Each lock lives on the master of its name's slot, with the same keys,
/// scripts, FIFO queue, semaphores and read-write locks as on one server.
/// Clones share the connections. See the [crate documentation](crate) for
/// what a failover means for a held lock and its fencing token.
#[derive(Clone)]
pub struct RedisClusterBackend {
    servers: Arc<Servers>,
    config: Arc<RedisClusterConfig>,
}

impl RedisClusterBackend {
    /// Connects to the cluster through its seed nodes, reads its masters,
    /// and subscribes to this instance's wake-up channel on a seed.
    ///
    /// Fails within `connect_timeout` with `Unavailable` naming the seeds
    /// when none of them (or not every master) answers, `Unauthorized`
    /// (wrong credentials) or `InvalidConfig` (a bad setting).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future closes whatever was opened.
    pub async fn connect(config: RedisClusterConfig) -> Result<Self> {
        config.validate()?;
        let servers = Servers::connect_cluster(&config.nodes, &config.common).await?;
        Ok(RedisClusterBackend {
            servers,
            config: Arc::new(config),
        })
    }

    /// Connects to the cluster of a `redis+cluster://` or
    /// `rediss+cluster://` URL.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(RedisClusterConfig::from_url(url)?).await
    }

    /// The configuration this backend was connected with.
    pub fn config(&self) -> &RedisClusterConfig {
        &self.config
    }
}

/// A lock service on a majority of N independent Redis servers
/// (`redlock://h1,h2,h3`).
///
/// Clones share the connections. Not FIFO. See the [crate documentation](crate)
/// for what Redlock does and does not guarantee.
#[derive(Clone)]
pub struct RedlockBackend {
    servers: Arc<Servers>,
    config: Arc<RedlockConfig>,
}

impl RedlockBackend {
    /// Connects to every server and succeeds when a majority is reachable and
    /// accepts the credentials (the others are retried in the background).
    ///
    /// Fails within `connect_timeout` with `Unavailable` naming the servers
    /// that did not answer, `Unauthorized`, or `InvalidConfig`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future closes whatever was opened.
    pub async fn connect(config: RedlockConfig) -> Result<Self> {
        config.validate()?;
        let servers = Servers::connect(Mode::Redlock, &config.servers, &config.common).await?;
        Ok(RedlockBackend {
            servers,
            config: Arc::new(config),
        })
    }

    /// Connects to the servers of a `redlock://` URL.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(RedlockConfig::from_url(url)?).await
    }

    /// The configuration this backend was connected with.
    pub fn config(&self) -> &RedlockConfig {
        &self.config
    }

    /// Servers that must grant a lock.
    pub fn quorum(&self) -> usize {
        self.servers.quorum
    }
}

/// Implements the lock and election traits for a backend; `shared` says
/// whether it has semaphores and read-write locks (the single server and
/// the cluster do, Redlock does not).
macro_rules! impl_backend {
    ($backend:ident, shared: $shared:expr) => {
        impl fmt::Debug for $backend {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($backend))
                    .field("servers", &self.servers.addrs())
                    .field("quorum", &self.servers.quorum)
                    .field("default_ttl", &self.servers.default_ttl)
                    .finish()
            }
        }

        #[async_trait]
        impl LockBackend for $backend {
            fn capabilities(&self) -> Capabilities {
                capabilities(&self.servers)
            }

            fn default_ttl(&self) -> Duration {
                self.servers.default_ttl
            }

            /// Acquires `name`, or (on a single server or a cluster) a permit
            /// of the semaphore `name` or a side of the read-write lock
            /// `name`, in their own key spaces.
            ///
            /// # Cancel safety
            ///
            /// Cancelling gives up the attempt and its place in the queue: a
            /// spawned task removes the queue entry (and deletes the lock if
            /// a grant was in flight, owner-checked), and wakes the next
            /// waiters if that freed room. If that task cannot run, the
            /// entry expires after one TTL.
            async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
                let (space, access) = match request.access {
                    None => (Space::Lock, Access::Write),
                    Some(access) if $shared => (Space::shared(access), access),
                    Some(_) => return Err(request.unsupported(&capabilities(&self.servers))),
                };
                self.servers
                    .acquire(space, access, request.name, request.options, None)
                    .await
            }

            /// The holder (by majority on Redlock) and the waiters of `name`,
            /// one script call per server.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
                self.servers.inspect_name(name).await
            }

            /// Locks and elections under the prefix: `SCAN` of every server,
            /// then one inspect per listed name.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            async fn list(&self, options: &ListOptions) -> Result<ListPage> {
                self.servers.list(options).await
            }

            /// Deletes the holder's key on every server and remembers its
            /// owner id, so its next renewal reports `Revoked`.
            ///
            /// # Cancel safety
            ///
            /// Not cancel safe: a cancelled call may have broken the lock on
            /// some servers; calling again finishes it.
            async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
                self.servers.force_release(name).await
            }
        }

        #[async_trait]
        impl ElectionBackend for $backend {
            /// Waits until leader, then publishes `value`.
            ///
            /// # Cancel safety
            ///
            /// As [`LockBackend::acquire`]: the candidacy's queue entry is
            /// removed in the background.
            async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
                election::campaign(&self.servers, name, bid).await
            }

            /// The leader a quorum of servers agrees on, if any.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
                self.servers.leader(name).await
            }

            /// Follows the leaders of `name`.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: dropping the future or the stream stops observing.
            async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
                election::observe(&self.servers, name).await
            }
        }
    };
}

/// The guarded writes of a backend: see [`crate::GuardedScript`] and the
/// module `guarded_write` for how the server checks the lock.
macro_rules! impl_guarded_writes {
    ($backend:ident, $where:literal) => {
        distlock_core::guarded_writes_by_inherent_methods!($backend);

        impl $backend {
            /// Sets `key` to `value`, only while `guard` (of a lock or a
            /// leadership from this backend) still holds it: a Lua script
            /// checks the lock's owner and token and writes, atomically.
            #[doc = $where]
            ///
            /// Fails with `LeaseLost`, writing nothing, once the lock is gone
            /// or belongs to a newer acquisition; with `Timeout` or
            /// `Unavailable` when the reply was lost (the write may or may
            /// not have happened).
            ///
            /// # Cancel safety
            ///
            /// Not cancel safe: a cancelled write may or may not have run
            /// (atomically, and only while the lock was held).
            pub async fn guarded_put(
                &self,
                guard: &LockGuard,
                key: &str,
                value: impl AsRef<[u8]>,
            ) -> Result<()> {
                crate::guarded_write::put(&self.servers, guard, key, value.as_ref()).await
            }

            /// Deletes `key` only while `guard` holds its lock, as
            /// [`guarded_put`](Self::guarded_put); whether the key existed.
            ///
            /// # Cancel safety
            ///
            /// As [`guarded_put`](Self::guarded_put).
            pub async fn guarded_delete(&self, guard: &LockGuard, key: &str) -> Result<bool> {
                crate::guarded_write::delete(&self.servers, guard, key).await
            }

            /// Runs `script` with `keys` (its `KEYS`) and `args` (its
            /// `ARGV`) only while `guard` holds its lock, and returns what
            /// it returns. The check and the script are one atomic script.
            #[doc = $where]
            ///
            /// Fails as [`guarded_put`](Self::guarded_put), and with
            /// `Backend` when the script fails or its result does not
            /// convert to `T`.
            ///
            /// # Cancel safety
            ///
            /// As [`guarded_put`](Self::guarded_put).
            pub async fn guarded_eval<T: redis::FromRedisValue>(
                &self,
                guard: &LockGuard,
                script: &crate::GuardedScript,
                keys: &[&str],
                args: &[&[u8]],
            ) -> Result<T> {
                crate::guarded_write::eval(&self.servers, guard, script, keys, args).await
            }

            /// Asks the server whether `guard` still holds its lock. A
            /// `true` may be stale by the time it is read; to act on it,
            /// use a guarded write.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            pub async fn is_owner(&self, guard: &LockGuard) -> Result<bool> {
                crate::guarded_write::is_owner(&self.servers, guard).await
            }
        }
    };
}

impl_guarded_writes!(
    RedisBackend,
    "\n\nThe keys may be any keys of the server's database: the script runs on the \
     lock's server."
);
impl_guarded_writes!(
    RedisClusterBackend,
    "\n\nEvery key must share the lock's `{name}` hash tag (the lock's keys are \
     `<prefix>lock:{<name>}:...`), so that it lives on the master that holds the \
     lock; other keys are refused with `InvalidConfig`."
);
impl_guarded_writes!(
    RedlockBackend,
    "\n\nRedlock always fails with `Unsupported`: its lock is a majority of \
     independent servers, which no single server's script can check. Pass the fencing \
     token to the storage instead (the facade's `distlock::fence`)."
);

impl_backend!(RedisBackend, shared: true);
impl_backend!(RedisClusterBackend, shared: true);
// Redlock keeps the default `acquire_as`: `Unsupported`.
impl_backend!(RedlockBackend, shared: false);
