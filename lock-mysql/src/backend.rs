//! [`MysqlBackend`]: the queue in `entries`, looked at again with a
//! bounded backoff, leases kept by distlock-core.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::AdminCapabilities;
use distlock_core::raw::{Grant, LossNotifier, Renewer, SentAt};
use distlock_core::{
    Access, AcquireOptions, AcquireRequest, Capabilities, Error, FencingStrength, HolderInfo,
    ListOptions, ListPage, LockBackend, LockGuard, LockName, LockStatus, Result, Wait,
};
use tokio::time::Instant;
use uuid::Uuid;

use crate::acquire_cleanup::AcquireCleanup;
use crate::config::{Layout, MIN_TTL, MysqlConfig};
use crate::keys::{self, Space};
use crate::lease::MysqlLease;
use crate::look::{Attempt, Outcome};
use crate::named::LastToken;
use crate::pool::Pool;
use crate::schema::{self, Tables};
use crate::sessions::Sessions;
use crate::sql::Sql;
use crate::waiter::Waiter;
use crate::wake::HolderWake;

/// Backend name in capabilities, metrics and messages.
pub(crate) const MYSQL: &str = "mysql";

/// What a backend shares with its guards and background work.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: MysqlConfig,
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) renewer: Renewer,
    /// The named layout's idle sessions.
    pub(crate) sessions: Arc<Sessions>,
    /// The named layout's last token.
    pub(crate) named_tokens: LastToken,
}

/// A lock service on MySQL or MariaDB (`mysql://` or `mariadb://`).
///
/// Clones share the connections. See the [crate documentation](crate) for
/// the table layout, the algorithm and the failure behaviour.
#[derive(Clone)]
pub struct MysqlBackend {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// How long a waiter pauses before trying again after a failed request.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Whether `deadline` passes within `within` from now.
fn passed(deadline: Option<Instant>, within: Duration) -> bool {
    deadline.is_some_and(|d| Instant::now() + within >= d)
}

impl MysqlBackend {
    /// Connects and, in the table layout, creates the lock tables if they
    /// are missing (see the crate docs for running it as a user that may
    /// not create tables).
    ///
    /// Fails with `Unauthorized` for a wrong password, `InvalidConfig`
    /// naming a missing database, and `Unavailable` when the server cannot
    /// be reached within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect leaves nothing behind but a
    /// connection that closes; a migration cut short is finished by the
    /// next client (its statements are idempotent).
    pub async fn connect(config: MysqlConfig) -> Result<Self> {
        config.check()?;
        let bound = config.request_timeout.max(config.connect_timeout) * 2;
        match config.layout {
            Layout::Table => {
                crate::pool::bounded(bound, "prepare the lock tables", schema::migrate(&config))
                    .await?;
            }
            Layout::Named => {
                // Log in once, so that bad credentials fail here.
                let conn = crate::connect::open(&config).await?;
                drop(conn);
            }
        }
        let tables = Tables::new(&config.table_prefix);
        Ok(MysqlBackend {
            inner: Arc::new(Inner {
                pool: Pool::new(&config),
                sql: Sql::new(&tables),
                sessions: Sessions::new(&config),
                config,
                renewer: Renewer::new(),
                named_tokens: LastToken::default(),
            }),
        })
    }

    /// Connects to the server of a `mysql://` URL (see [`MysqlConfig::from_url`]).
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(MysqlConfig::from_url(url)?).await
    }

    /// The configuration this backend was connected with.
    pub fn config(&self) -> &MysqlConfig {
        &self.inner.config
    }

    /// The key of `name` in `space`.
    pub(crate) fn key(&self, space: Space, name: &LockName) -> String {
        keys::key(&self.inner.config.prefix, space, name)
    }

    /// Acquires `claim.name` in `claim.space` as `claim.access`, publishing
    /// `claim.value` with the grant (elections), waiting as
    /// `claim.options.wait` allows.
    pub(crate) async fn acquire_in(&self, claim: Claim<'_>) -> Result<LockGuard> {
        let name = claim.name;
        if self.inner.config.layout == Layout::Named {
            if claim.space != Space::Lock || claim.access != Access::Write {
                return Err(self.named_lacks(match claim.space {
                    Space::Election => "elections",
                    _ => "semaphores or read-write locks",
                }));
            }
            let acquire = self.acquire_named(name, claim.options);
            return distlock_core::raw::observe_acquire(MYSQL, name, acquire).await;
        }
        let acquire = self.acquire_queued(claim);
        distlock_core::raw::observe_acquire(MYSQL, name, acquire).await
    }

    /// Acquires `claim` in the table layout: queues, then looks again
    /// until first.
    async fn acquire_queued(&self, claim: Claim<'_>) -> Result<LockGuard> {
        let Claim {
            space,
            access,
            name,
            options,
            value,
        } = claim;
        let ttl = options.ttl_for(self.inner.config.ttl, &self.capabilities())?;
        crate::config::check_ttl(ttl)?;
        let key = self.key(space, name);
        keys::check_len(&key)?;
        let holder = options.holder_description(self.inner.config.holder.as_deref());
        let owner = Uuid::new_v4();
        let queue = !matches!(options.wait, Wait::No);
        let deadline = options.wait.deadline_from(Instant::now());
        let mut cleanup = AcquireCleanup::new(&self.inner, owner);
        let attempt = Attempt {
            key: key.clone(),
            owner: owner.to_string(),
            access,
            ttl_us: u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX),
            holder,
            value,
            queue,
        };
        let mut waiter = Waiter::new(&self.inner, &key, access, ttl);
        loop {
            let outcome = match crate::look::look(&self.inner, &attempt).await {
                Ok(outcome) => outcome,
                // A waiter rides out a server that is briefly away (a
                // restart, a lock wait that gave up, a deadlock victim)
                // until its deadline; the retry finds its entry, or queues
                // again if the entry was lost.
                Err(e) if queue && e.is_retryable() && !passed(deadline, RETRY_PAUSE) => {
                    tracing::debug!(key = %key, error = %e, "acquire failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => {
                    waiter.finish().await;
                    cleanup.finish().await;
                    return Err(e);
                }
            };
            match outcome {
                Outcome::Granted(token, sent, behind) => {
                    cleanup.disarm();
                    let wake = waiter.granted(behind).await;
                    return self.guard(name, &key, owner, (token, sent), ttl, wake);
                }
                Outcome::LimitDiffers(theirs) => {
                    waiter.finish().await;
                    cleanup.disarm();
                    return Err(Error::invalid_config(format!(
                        "semaphore {name} is in use with a limit of {theirs} permits, not {}: \
                         every holder of one semaphore must agree on its limit",
                        keys::stored_access(access).1.unwrap_or_default()
                    )));
                }
                Outcome::Waiting(..) if !queue => {
                    waiter.finish().await;
                    cleanup.disarm();
                    return Err(Error::would_block(format!(
                        "{} is held by someone else",
                        describe(access, name)
                    )));
                }
                Outcome::Waiting(place) => {
                    waiter.pause(&place, deadline).await;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        waiter.finish().await;
                        cleanup.finish().await;
                        return Err(Error::timeout(format!(
                            "{} is still held by someone else after waiting {}",
                            describe(access, name),
                            match options.wait {
                                Wait::Timeout(wait) => distlock_core::raw::human_duration(wait),
                                _ => "its wait".to_owned(),
                            }
                        )));
                    }
                }
            }
        }
    }

    /// `Unsupported` for what the named layout does not offer.
    pub(crate) fn named_lacks(&self, what: &str) -> Error {
        Error::unsupported(format!(
            "the mysql backend's named layout has no {what}; use layout=table"
        ))
    }

    /// Fails with `Unsupported` under the named layout.
    pub(crate) fn table_only(&self, what: &str) -> Result<()> {
        match self.inner.config.layout {
            Layout::Table => Ok(()),
            Layout::Named => Err(self.named_lacks(what)),
        }
    }

    fn guard(
        &self,
        name: &LockName,
        key: &str,
        owner: Uuid,
        (token, sent): (u64, SentAt),
        ttl: Duration,
        wake: Arc<HolderWake>,
    ) -> Result<LockGuard> {
        let notifier = LossNotifier::new();
        let grant = Grant::new(name.clone(), token, key, ttl, sent)
            .with_notifier(notifier.clone())
            .renewed_by(&self.inner.renewer);
        distlock_core::raw::leased_guard(
            grant,
            MysqlLease {
                inner: self.inner.clone(),
                owner: owner.to_string(),
                key: key.to_owned(),
                token,
                ttl_us: u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX),
                notifier,
                wake,
            },
        )
    }
}

/// What an acquisition asks for: which lock, in which key space and with
/// which access, how to wait, and the value an election publishes with its
/// grant.
pub(crate) struct Claim<'a> {
    pub(crate) space: Space,
    pub(crate) access: Access,
    pub(crate) name: &'a LockName,
    pub(crate) options: &'a AcquireOptions,
    pub(crate) value: Option<Vec<u8>>,
}

/// What an acquisition asks for, for messages.
fn describe(access: Access, name: &LockName) -> String {
    match access {
        Access::Write => format!("lock {name}"),
        other => other.describe(name),
    }
}

fn capabilities(layout: Layout) -> Capabilities {
    if layout == Layout::Named {
        // The server's lock waits are not promised to be FIFO; tokens come
        // from a clock-free local counter only for this process, so they
        // are best effort; no election, shared primitives or admin
        // operations on sessions' locks.
        return Capabilities::new(MYSQL, FencingStrength::BestEffort)
            .with_ttl_limits(MIN_TTL, Duration::from_millis(1));
    }
    Capabilities::new(MYSQL, FencingStrength::Strong)
        .with_ttl_limits(MIN_TTL, Duration::from_millis(1))
        .with_fifo(true)
        .with_election(true)
        .with_shared(true, true)
        .with_admin(AdminCapabilities::all())
}

#[async_trait]
impl LockBackend for MysqlBackend {
    /// Table layout: strong tokens from a per-key counter, FIFO,
    /// elections, semaphores, read-write locks, every admin operation.
    /// Named layout: plain locks with best-effort tokens.
    fn capabilities(&self) -> Capabilities {
        capabilities(self.inner.config.layout)
    }

    fn default_ttl(&self) -> Duration {
        self.inner.config.ttl
    }

    /// Acquires `name`: joins its queue and waits to be first; or a permit
    /// of the semaphore `name`, or a side of the read-write lock `name`, in
    /// their own key spaces.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the attempt and its place in the queue: a spawned
    /// task deletes the queue entry (or a grant whose answer was in flight,
    /// owner-checked). If that task cannot run, the entry expires after one
    /// TTL. In the named layout the waiting session is killed and closed,
    /// and a closed session holds nothing.
    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        let (space, access) = match request.access {
            None => (Space::Lock, Access::Write),
            Some(access) => (Space::shared(access), access),
        };
        self.acquire_in(Claim {
            space,
            access,
            name: request.name,
            options: request.options,
            value: None,
        })
        .await
    }

    /// The holder and waiters of `name`'s lock, or of its election when
    /// only that is in use: one query each.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        self.table_only("inspect")?;
        crate::admin::inspect(self, name).await
    }

    /// Locks, elections, semaphores and read-write locks under the prefix
    /// that are held or waited for: one query.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        self.table_only("list")?;
        crate::admin::list(self, options).await
    }

    /// Deletes the holder's entry of `name`'s lock (or of its election when
    /// the lock is not held), under the key's row lock. Its next renewal
    /// finds the entry gone and fires `Revoked`; the next grant's token
    /// comes from the same counter, so it is higher.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have evicted the holder.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        self.table_only("force_release")?;
        crate::admin::force_release(self, name).await
    }
}
