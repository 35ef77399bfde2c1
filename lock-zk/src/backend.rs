//! `ZkBackend`: connecting, reopening an expired session, and acquiring.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::AdminCapabilities;
use distlock_core::raw::Validity;
use distlock_core::{
    AcquireOptions, AcquireRequest, Capabilities, ErrorKind, FencingStrength, FencingToken,
    HolderInfo, ListOptions, ListPage, LockBackend, LockGuard, LockName, LockStatus, LostReason,
    Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ahead::Ask;
use crate::cleanup::AcquireCleanup;
use crate::config::{MIN_SESSION_TIMEOUT, Resolved, ZkConfig};
use crate::deadline::Deadline;
use crate::errors::ZkSite;
use crate::held::ZkHeld;
use crate::keys::{Role, Space};
use crate::queue;
use crate::root;
use crate::session::Session;

/// A ZooKeeper lock and election service: one session, shared by every lock
/// and leadership it grants. Clones share the session.
///
/// See the [crate documentation](crate) for the algorithm and guarantees.
#[derive(Clone)]
pub struct ZkBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: ZkConfig,
    settings: Arc<Resolved>,
    current: Mutex<Arc<Session>>,
    reopening: tokio::sync::Mutex<()>,
}

impl fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.inner.config)
            .field("session", &*self.current())
            .finish()
    }
}

impl ZkBackend {
    /// Opens a session and prepares the lock root.
    ///
    /// Fails with `InvalidConfig` for a bad config, `Unavailable` when no
    /// server answers within `connect_timeout`, `Unauthorized` when the
    /// credentials do not allow creating and deleting nodes under the lock
    /// root, and `InvalidConfig` when the root cannot be created there or
    /// when the server does not grant the configured session timeout (the
    /// TTL of every lock) because it is outside the server's
    /// `minSessionTimeout..maxSessionTimeout`; the message names both values.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect closes its session (if one was
    /// opened), and the nodes it created for the root are plain directories.
    pub async fn connect(config: ZkConfig) -> Result<Self> {
        let settings = Arc::new(config.resolve()?);
        let session = Session::open(settings.clone()).await?;
        if let Some(credentials) = &settings.credentials {
            // This client has no TLS: say so once per backend, since the
            // password crosses the network readable by anyone on the path.
            tracing::warn!(
                server = %settings.connect_string,
                user = %credentials.username,
                "ZooKeeper digest credentials are sent over a plain connection (this client \
                 has no TLS): anyone on the network path can read the password; use a private \
                 network or a TLS tunnel to the servers"
            );
        }
        root::prepare(&session).await?;
        Ok(ZkBackend {
            inner: Arc::new(Inner {
                config,
                settings,
                current: Mutex::new(session),
                reopening: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Connects to the backend a `zk://` URL names, with the URL's options.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(ZkConfig::from_url(url)?).await
    }

    /// The config this backend was built from.
    pub fn config(&self) -> &ZkConfig {
        &self.inner.config
    }

    /// The current session's id (as ZooKeeper's `ephemeralOwner` shows it).
    pub fn session_id(&self) -> i64 {
        self.current().client.session_id().0
    }

    /// The negotiated session timeout: the TTL of every lock of this client.
    pub fn session_timeout(&self) -> Duration {
        self.current().timing.session
    }

    /// The raw `zookeeper-client` handle of the current session, for reads
    /// and setup that need no lock. Nodes created through it do not get the
    /// backend's ACLs unless you pass them.
    pub fn client(&self) -> zk::Client {
        self.current().client.clone()
    }

    pub(crate) fn current(&self) -> Arc<Session> {
        self.inner
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn settings(&self) -> &Resolved {
        &self.inner.settings
    }

    /// The live session, reopening it if it expired or was closed. Locks
    /// held on an expired session stay lost; new ones use the new session.
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        let current = self.current();
        if !current.is_over() {
            return Ok(current);
        }
        let _reopening = self.inner.reopening.lock().await;
        let current = self.current();
        if !current.is_over() {
            return Ok(current);
        }
        if current.client.state() == zk::SessionState::AuthFailed {
            return Err(crate::errors::doing(
                "opening a session",
                &self.inner.settings.connect_string,
            )
            .client_error(zk::Error::AuthFailed));
        }
        tracing::info!(old = %current.client.session_id(), "zk session ended; opening a new one");
        let fresh = Session::open(self.inner.settings.clone()).await?;
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        Ok(fresh)
    }

    /// The TTL is the session timeout: at least [`MIN_SESSION_TIMEOUT`], in
    /// whole milliseconds, and granted exactly as requested or `connect`
    /// fails (see [`Session::open`]). `inspect` reads the holder's and the
    /// waiters' nodes: their data (the description), `czxid` (the token)
    /// and `ctime` (when the holder's node was created); another client's
    /// session timeout is not visible, so there is no `lease_left`.
    pub(crate) fn caps(&self) -> Capabilities {
        Capabilities::new(crate::errors::BACKEND, FencingStrength::Strong)
            .with_fifo(true)
            .with_election(true)
            .with_shared(true, true)
            .with_per_lock_lease(false)
            // A multi checks the lock node with the write.
            .with_guarded_writes(true)
            .with_ttl_limits(MIN_SESSION_TIMEOUT, Duration::from_millis(1))
            .with_admin(AdminCapabilities::all().with_lease_left(false))
    }

    /// Acquires as `ask` asks, the holder description (see
    /// [`ZkBackend::holder_description`]) in the node's data.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`].
    async fn acquire_described(&self, ask: Ask<'_>, options: &AcquireOptions) -> Result<LockGuard> {
        let description = match self.holder_description(options) {
            Ok(description) => description,
            // Counted and traced like any other refused acquisition.
            Err(e) => {
                return distlock_core::raw::observe_acquire(
                    crate::errors::BACKEND,
                    ask.name,
                    async { Err(e) },
                )
                .await;
            }
        };
        let data = ask.node_data(description.as_bytes());
        self.acquire_in(ask, options, &data).await
    }

    /// The description a lock acquired with `options` stores as its node's
    /// data: the acquisition's label, else the configured `holder`, else
    /// `host:pid`. A label that is empty or too long is `InvalidConfig`.
    pub(crate) fn holder_description(&self, options: &AcquireOptions) -> Result<String> {
        let description = options.holder_description(self.inner.settings.holder.as_deref());
        crate::config::check_holder(&description)?;
        Ok(description)
    }

    /// Joins the queue of `ask.name` in its space and builds the guard once
    /// the entries ahead of our node let it in, inside distlock-core's
    /// `distlock.acquire` span and metrics.
    pub(crate) async fn acquire_in(
        &self,
        ask: Ask<'_>,
        options: &AcquireOptions,
        data: &[u8],
    ) -> Result<LockGuard> {
        let name = ask.name;
        let attempt = async {
            let requested = options.effective_ttl(self.session_timeout())?;
            let dir = self.inner.settings.layout.name_dir(ask.space(), name)?;
            let deadline = Deadline::new(
                options.wait,
                Instant::now(),
                self.inner.settings.request_timeout,
            );
            let mut fresh_session_tried = false;
            loop {
                let session = self.session_within(&deadline, &action(&ask)).await?;
                match self
                    .acquire_on(&session, &ask, &dir, &deadline, data, requested)
                    .await
                {
                    Err(e)
                        if e.kind() == ErrorKind::LeaseLost
                            && session.is_over()
                            && !fresh_session_tried =>
                    {
                        // The session ended before we held anything: queue again
                        // on a new session rather than fail the caller.
                        tracing::debug!(error = %e, "zk session ended during acquisition; retrying on a new session");
                        fresh_session_tried = true;
                    }
                    result => return result,
                }
            }
        };
        distlock_core::raw::observe_acquire(crate::errors::BACKEND, name, attempt).await
    }

    /// [`ZkBackend::session`], given up at the acquisition's hard deadline.
    async fn session_within(&self, deadline: &Deadline, action: &str) -> Result<Arc<Session>> {
        let Some(hard) = deadline.hard() else {
            return self.session().await;
        };
        match tokio::time::timeout_at(hard, self.session()).await {
            Ok(session) => session,
            Err(_) => Err(
                crate::errors::doing(action, &self.inner.settings.connect_string).error(
                    ErrorKind::Timeout,
                    "the session ended and no new one opened within the wait plus one request \
                 timeout; is a ZooKeeper server reachable?",
                ),
            ),
        }
    }

    async fn acquire_on(
        &self,
        session: &Arc<Session>,
        ask: &Ask<'_>,
        dir: &str,
        deadline: &Deadline,
        data: &[u8],
        requested: Duration,
    ) -> Result<LockGuard> {
        let session = session.clone();
        let ttl = session.timing.session;
        if requested != ttl {
            tracing::debug!(
                ?requested,
                ?ttl,
                "zk locks live as long as the session; the TTL is the session timeout"
            );
        }
        let action = action(ask);
        let doing = crate::errors::doing(&action, &session.settings.connect_string);
        let head = queue::join_and_wait(
            &session,
            &session.settings.layout,
            ask,
            dir,
            data,
            deadline,
            &doing,
        )
        .await?;
        tracing::debug!(path = %head.path, token = head.czxid, "zk node granted");
        // Vouched for by the leader's evidence only: the create's answer came
        // from our server, which may have lost the leader since.
        let validity = Validity::from_sent(&session.evidence(), session.timing.trusted_for());
        if !validity.is_valid() {
            head.notifier.fire(LostReason::Released);
            session.remove_now(AcquireCleanup::Node(head.path.clone()));
            if let Some(duplicates) = head.duplicates {
                session.remove_now(duplicates);
            }
            return Err(doing.error(
                ErrorKind::Unavailable,
                format!(
                    "our node {} was granted, but the leader has not confirmed the session \
                     recently (is our server cut off from the ensemble?); the node is deleted; \
                     retry",
                    head.path
                ),
            ));
        }
        let hold = session.register(head.path.clone(), head.notifier.clone(), validity.clone());
        let _ = head.hold.set(hold);
        let notifier = head.notifier;
        let watcher = head.watcher;
        let token = u64::try_from(head.czxid).unwrap_or_default();
        let held = ZkHeld {
            session,
            hold,
            path: head.path.clone(),
            name: ask.name.clone(),
            space: ask.space(),
            access: ask.access,
            token,
            signal: notifier.signal(),
            notifier: notifier.clone(),
            watcher: Some(watcher),
            duplicates: head.duplicates,
        };
        Ok(distlock_core::raw::session_guard(
            ask.name.clone(),
            FencingToken(token),
            head.path,
            ttl,
            notifier.signal(),
            Box::new(held),
            Some(validity),
        ))
    }
}

/// What an acquisition is doing, for messages.
fn action(ask: &Ask<'_>) -> String {
    let name = ask.name;
    match ask.space() {
        Space::Lock => format!("acquiring lock {name}"),
        Space::Election => format!("campaigning in election {name}"),
        Space::Semaphore | Space::RwLock => format!("acquiring {}", ask.access.describe(name)),
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn capabilities(&self) -> Capabilities {
        self.caps()
    }

    /// The session timeout: ZooKeeper locks live as long as their session.
    fn default_ttl(&self) -> Duration {
        self.session_timeout()
    }

    /// Joins the queue of the lock (or of the semaphore or read-write lock,
    /// in `semaphores/` or `rwlocks/`, apart from the lock of the same name)
    /// and waits until the nodes ahead of ours let us in, watching only the
    /// ones that block us. The node's data is the holder description (see
    /// [`AcquireOptions::holder`]); a permit's also stores its limit. The
    /// token is our node's `czxid`. See the crate documentation,
    /// "Semaphores and read-write locks".
    ///
    /// A TTL in `options` is checked (zero is `InvalidConfig`) but the lock
    /// lives as long as the session: the guard's `ttl()` is the session
    /// timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancelling loses the place in the queue. The queue node is deleted at
    /// once (the delete is sent from the future's destructor) or, if the
    /// connection is down, as soon as it returns; if the `create` reply never
    /// arrived, the node is found by its GUID first. It never blocks others
    /// beyond the session timeout.
    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        let ask = match request.access {
            None => Ask::exclusive(request.name, Role::Lock),
            Some(access) => Ask::shared(request.name, access),
        };
        self.acquire_described(ask, request.options).await
    }

    /// The lowest node of the lock's queue and the nodes behind it, each
    /// with its data as the description. Two round trips: `sync` and
    /// `getChildren` (pipelined), then one `getData` per node (pipelined).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        crate::admin::inspect(self, name).await
    }

    /// The locks and elections with at least one node, under
    /// `options.prefix`, one page of them. See the crate documentation
    /// (Operating) for what is walked in each layout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        crate::admin::list(self, options).await
    }

    /// Deletes the holder's node. The holder's own-node watch then fires
    /// `LostReason::Revoked`; the next node in the queue becomes the holder,
    /// with a higher `czxid`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have deleted the
    /// holder's node.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        crate::admin::force_release(self, name).await
    }
}
