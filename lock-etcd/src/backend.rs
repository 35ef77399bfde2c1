//! [`EtcdBackend`]: one etcd client, the key layout, and the lease pool.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::AdminCapabilities;
use distlock_core::{
    AcquireOptions, AcquireRequest, Capabilities, FencingStrength, HolderInfo, ListOptions,
    ListPage, LockBackend, LockGuard, LockName, LockStatus, Result,
};

use crate::config::EtcdConfig;
use crate::connect::connect;
use crate::hub::WatchHub;
use crate::keepalive::KeepAliveHub;
use crate::keys::{KeySpace, Space};
use crate::pool::LeasePool;
use crate::rpc::Rpc;
use crate::view::Views;
use crate::{admin, held, listing, queue};

/// A distributed lock and election service on etcd.
///
/// One instance holds one etcd client (its connections and streams); clones
/// share it. Every guard gets a lease of its own. See the crate docs for
/// the algorithm and its costs.
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

/// What all clones of a backend share.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) rpc: Rpc,
    pub(crate) keys: KeySpace,
    pub(crate) pool: Arc<LeasePool>,
    pub(crate) hub: WatchHub,
    /// Live copies of the queues this backend waits in.
    pub(crate) views: Views,
    /// The keepalive stream all leases of this backend share.
    pub(crate) keepalive: Arc<KeepAliveHub>,
    pub(crate) config: EtcdConfig,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.inner.config.endpoints)
            .field("prefix", &self.inner.config.prefix)
            .field("layout", &self.inner.config.layout)
            .field("default_ttl", &self.inner.config.default_ttl)
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Connects to the cluster and checks that it answers, within
    /// `config.connect_timeout`.
    ///
    /// Fails with `InvalidConfig` for a bad configuration, `Unauthorized`
    /// for rejected credentials, and `Unavailable` when no member answered
    /// in time (or the cluster has no leader). Errors name the endpoints.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is written; a dropped future just closes the
    /// connection attempt.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let client = connect(&config).await?;
        let rpc = Rpc::new(
            client,
            config.endpoint_list(),
            config.request_timeout,
            config.username.is_some(),
        );
        let keepalive = KeepAliveHub::new(rpc.clone());
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                pool: LeasePool::new(rpc.clone(), keepalive.clone()),
                hub: WatchHub::new(rpc.clone()),
                views: Views::default(),
                keepalive,
                rpc,
                keys: KeySpace::new(&config.prefix, config.layout),
                config,
            }),
        })
    }

    /// Connects to the backend a `etcd://` URL names, with the URL's options.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(EtcdConfig::from_url(url)?).await
    }

    /// The configuration this backend was connected with.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The underlying `etcd-client` client, for your own requests, such as
    /// writes guarded by [`is_owner`](crate::is_owner).
    pub fn client(&self) -> etcd_client::Client {
        self.inner.rpc.client().clone()
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn caps() -> Capabilities {
        Capabilities::new("etcd", FencingStrength::Strong)
            .with_fifo(true)
            .with_election(true)
            .with_shared(true, true)
            // A Txn compares the lock key's create revision with the write.
            .with_guarded_writes(true)
            .with_ttl_limits(Duration::from_secs(1), Duration::from_secs(1))
            // etcd keeps no time with a key: when the holder got the lock
            // is not known.
            .with_admin(AdminCapabilities::all().with_acquired_at(false))
    }

    /// Acquires `name` in `space`, publishing `value` with the key, inside
    /// distlock-core's `distlock.acquire` span and metrics.
    pub(crate) async fn acquire_in(
        &self,
        space: Space,
        name: &LockName,
        options: &AcquireOptions,
        value: Vec<u8>,
    ) -> Result<LockGuard> {
        let caps = Self::caps();
        distlock_core::raw::observe_acquire(caps.backend, name, async {
            let ttl = options.ttl_for(self.inner.config.default_ttl, &caps)?;
            let secs = whole_seconds(ttl);
            let queue = self.inner.keys.queue(space, name);
            let won =
                queue::acquire(&self.inner, space, name, queue, value, secs, options.wait).await?;
            tracing::debug!(
                token = won.rev,
                key = won.key,
                space = space.noun(),
                "etcd lock acquired"
            );
            Ok(held::guard(self.inner.clone(), space, name.clone(), won))
        })
        .await
    }

    /// What a lock's key holds: the description of its holder.
    fn description(&self, options: &AcquireOptions) -> Vec<u8> {
        options
            .holder_description(self.inner.config.holder.as_deref())
            .into_bytes()
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn capabilities(&self) -> Capabilities {
        Self::caps()
    }

    fn default_ttl(&self) -> Duration {
        self.inner.config.default_ttl
    }

    /// Joins the lock's revision queue and waits for the keys before ours
    /// to go. A semaphore's or read-write lock's entry stores its access
    /// with its key, and waits until the entries ahead allow it in
    /// ([`distlock_core::raw::blockers`]), watching only the entries that rule
    /// names. The token is the key's create revision.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the place in the queue: the entry's lease is
    /// revoked in the background, which deletes its key, so it never blocks
    /// other contenders or holds a permit (and would expire with its TTL
    /// even if etcd could not be reached).
    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        let AcquireRequest { name, options, .. } = request;
        match request.access {
            None => {
                self.acquire_in(Space::Lock, name, options, self.description(options))
                    .await
            }
            Some(access) => {
                let description = options.holder_description(self.inner.config.holder.as_deref());
                let value = crate::shared::value(access, &description);
                self.acquire_in(Space::Shared(access), name, options, value)
                    .await
            }
        }
    }

    /// The holder (its key's value is its description, its lease says how
    /// long the lock outlives it) and the waiters in queue order: one range
    /// read of the queue and one lease read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        admin::inspect(&self.inner, name).await
    }

    /// One page of the locks and elections under the prefix, read from the
    /// key range where the last page stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        listing::list(&self.inner, options).await
    }

    /// Deletes the holder's key (if it is still the one read), leaving its
    /// lease alone; the evicted guard's watch on that key fires its lost
    /// signal with `Revoked`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have deleted the
    /// holder's key.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        admin::force_release(&self.inner, name).await
    }
}

/// etcd leases are whole seconds: round up, at least one.
fn whole_seconds(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        for (ms, secs) in [(1, 1), (1000, 1), (1001, 2), (30_000, 30)] {
            assert_eq!(whole_seconds(Duration::from_millis(ms)), secs, "{ms} ms");
        }
    }
}
