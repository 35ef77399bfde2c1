//! [`PostgresBackend`]: the queue in `entries`, waited on with
//! `LISTEN`/`NOTIFY`, leases kept by distlock-core.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::AdminCapabilities;
use distlock_core::raw::{Grant, LossNotifier, Renewer, SentAt, Validity};
use distlock_core::{
    Access, AcquireOptions, AcquireRequest, Capabilities, Error, FencingStrength, HolderInfo,
    ListOptions, ListPage, LockBackend, LockGuard, LockName, LockStatus, Result, Wait,
};
use tokio::time::Instant;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::acquire_cleanup::AcquireCleanup;
use crate::config::{Layout, MIN_TTL, PostgresConfig};
use crate::keys::{self, Space};
use crate::lease::PgLease;
use crate::pool::Pool;
use crate::schema;
use crate::sessions::Sessions;
use crate::sql::Sql;
use crate::wakeups::{Listener, Wakeups};

/// Backend name in capabilities, metrics and messages.
pub(crate) const POSTGRES: &str = "postgres";
/// The shortest nap between two looks at a queue.
const MIN_NAP: Duration = Duration::from_millis(10);
/// The nap behind a grant that ran out but is kept by an open fenced
/// transaction: nobody notifies when that transaction ends.
const FENCED_NAP: Duration = Duration::from_millis(100);

/// What a backend shares with its guards and background work.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: PostgresConfig,
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) wakeups: Arc<Wakeups>,
    pub(crate) renewer: Renewer,
    /// The advisory layout's idle sessions.
    pub(crate) sessions: Arc<Sessions>,
    _listener: Listener,
}

/// A lock service on PostgreSQL (`postgres://` or `postgresql://`).
///
/// Clones share the connections. See the [crate documentation](crate) for
/// the table layout, the algorithm and the failure behaviour.
#[derive(Clone)]
pub struct PostgresBackend {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
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

/// What one look at the queue found.
enum Outcome {
    Granted(i64),
    /// Still blocked.
    Waiting(Waiting),
    /// A permit ahead has another limit.
    LimitDiffers(i32),
}

impl PostgresBackend {
    /// Connects, creates the lock tables if they are missing (once per
    /// database, see the crate docs for running it as another role), and
    /// starts listening for releases.
    ///
    /// Fails with `Unauthorized` for a wrong password, `InvalidConfig`
    /// naming a missing database, and `Unavailable` when the server cannot
    /// be reached within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect leaves nothing behind but a
    /// connection that closes.
    pub async fn connect(config: PostgresConfig) -> Result<Self> {
        config.check()?;
        let pool = Pool::new(&config);
        let client = pool.client().await?;
        let bound = config.request_timeout.max(config.connect_timeout);
        tokio::time::timeout(bound, crate::migrate::migrate(&client, &config))
            .await
            .map_err(|_| {
                crate::errors::timed_out(
                    &format!("prepare the lock tables in schema {}", config.schema),
                    bound,
                )
            })??;
        let (wakeups, listener) = Wakeups::start(
            &config,
            schema::channel(&config.schema),
            schema::wake_channel(&config.schema),
        );
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                sql: Sql::new(&config.schema),
                sessions: Sessions::new(&config),
                config,
                pool,
                wakeups,
                renewer: Renewer::new(),
                _listener: listener,
            }),
        })
    }

    /// Connects to the server of a `postgres://` URL (see [`PostgresConfig::from_url`]).
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(PostgresConfig::from_url(url)?).await
    }

    /// The configuration this backend was connected with.
    pub fn config(&self) -> &PostgresConfig {
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
        if self.inner.config.layout == Layout::Advisory {
            if claim.space != Space::Lock || claim.access != Access::Write {
                return Err(self.advisory_lacks(match claim.space {
                    Space::Election => "elections",
                    _ => "semaphores or read-write locks",
                }));
            }
            let acquire = self.acquire_advisory(name, claim.options);
            return distlock_core::raw::observe_acquire(POSTGRES, name, acquire).await;
        }
        let acquire = self.acquire_queued(claim);
        distlock_core::raw::observe_acquire(POSTGRES, name, acquire).await
    }

    /// Acquires `claim` in the table layout: queues, then waits to be first.
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
        let holder = options.holder_description(self.inner.config.holder.as_deref());
        let owner = Uuid::new_v4();
        let queue = !matches!(options.wait, Wait::No);
        let deadline = options.wait.deadline_from(Instant::now());
        // Listen before the first look, so no release falls between them.
        let watch = self.inner.wakeups.watch(&key, Some(owner));
        let mut cleanup = AcquireCleanup::new(&self.inner, owner);
        let attempt = Attempt {
            key: &key,
            owner,
            access,
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            holder: &holder,
            value: value.as_deref(),
            queue,
        };
        // When the last look that found the entry waiting was sent, and the
        // last token taken then: a grant of the entry that a notification
        // names came after that look, so its token is higher and its lease
        // counts from then on this side. A lower token named an earlier
        // entry of ours, granted and lost while we could not hear of it.
        let mut waiting_since: Option<(SentAt, i64)> = None;
        loop {
            let woken = watch.listen().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some((token, sent)) = notified_grant(watch.granted(), &waiting_since, ttl) {
                cleanup.disarm();
                return self.guard(name, &key, owner, token, ttl, sent);
            }
            let sent = SentAt::now();
            let outcome = match self.look(&attempt).await {
                Ok(outcome) => outcome,
                // A waiter rides out a server that is briefly away (a
                // restart, a failover) until its deadline; the retry finds
                // its entry, or queues again if the entry was lost.
                Err(e) if queue && e.is_retryable() && !passed(deadline, RETRY_PAUSE) => {
                    tracing::debug!(key = %key, error = %e, "acquire failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => {
                    cleanup.finish().await;
                    return Err(e);
                }
            };
            match outcome {
                Outcome::Granted(token) => {
                    cleanup.disarm();
                    return self.guard(name, &key, owner, token, ttl, sent);
                }
                Outcome::LimitDiffers(theirs) => {
                    cleanup.disarm();
                    return Err(Error::invalid_config(format!(
                        "semaphore {name} is in use with a limit of {theirs} permits, not {}: \
                         every holder of one semaphore must agree on its limit",
                        keys::stored_access(access).1.unwrap_or_default()
                    )));
                }
                Outcome::Waiting(_) if !queue => {
                    cleanup.disarm();
                    return Err(Error::would_block(format!(
                        "{} is held by someone else",
                        describe(access, name)
                    )));
                }
                Outcome::Waiting(waiting) => {
                    waiting_since = Some((sent, waiting.last_token));
                    // Look again when woken, when the grant ahead could have
                    // run out, and at least every TTL/3, which also keeps
                    // our queue entry alive.
                    let mut nap = ttl / 3;
                    match waiting.first_ends_in {
                        Some(ms) if ms > 0 => {
                            let ends = Duration::from_millis(ms.unsigned_abs());
                            nap = nap.min(ends + MIN_NAP);
                        }
                        Some(_) => nap = nap.min(FENCED_NAP),
                        None => {}
                    }
                    let nap = nap.max(MIN_NAP);
                    let wake_at = match deadline {
                        Some(deadline) => deadline.min(Instant::now() + nap),
                        None => Instant::now() + nap,
                    };
                    tokio::select! {
                        () = &mut woken => {}
                        () = tokio::time::sleep_until(wake_at) => {}
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d)
                        && notified_grant(watch.granted(), &waiting_since, ttl).is_none()
                    {
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

    /// `Unsupported` for what the advisory layout does not offer.
    pub(crate) fn advisory_lacks(&self, what: &str) -> Error {
        Error::unsupported(format!(
            "the postgres backend's advisory layout has no {what}; use layout=table"
        ))
    }

    /// Fails with `Unsupported` under the advisory layout.
    pub(crate) fn table_only(&self, what: &str) -> Result<()> {
        match self.inner.config.layout {
            Layout::Table => Ok(()),
            Layout::Advisory => Err(self.advisory_lacks(what)),
        }
    }

    /// One call of the schema's `acquire` function.
    async fn look(&self, attempt: &Attempt<'_>) -> Result<Outcome> {
        let (kind, permits) = keys::stored_access(attempt.access);
        let owner = attempt.owner.to_string();
        let sql = &self.inner.sql.acquire;
        let context = format!("acquire {}", attempt.key);
        let row = self
            .inner
            .pool
            .run(&context, |client| async move {
                client
                    .query_typed(
                        sql,
                        &[
                            (&attempt.key, Type::TEXT),
                            (&owner, Type::TEXT),
                            (&kind, Type::TEXT),
                            (&permits, Type::INT4),
                            (&attempt.ttl_ms, Type::INT8),
                            (&attempt.holder, Type::TEXT),
                            (&attempt.value, Type::BYTEA),
                            (&attempt.queue, Type::BOOL),
                        ],
                    )
                    .await
            })
            .await?;
        let row = row
            .first()
            .ok_or_else(|| Error::backend(format!("{context}: the server returned no row")))?;
        let outcome: &str = row.get(0);
        let token: Option<i64> = row.get(1);
        let detail: Option<i64> = row.get(2);
        match (outcome, token) {
            ("granted", Some(token)) => Ok(Outcome::Granted(token)),
            ("waiting", last_token) => Ok(Outcome::Waiting(Waiting {
                first_ends_in: detail,
                last_token: last_token.unwrap_or(0),
            })),
            ("limit", _) => Ok(Outcome::LimitDiffers(
                detail.and_then(|d| i32::try_from(d).ok()).unwrap_or(0),
            )),
            (other, _) => Err(Error::backend(format!(
                "{context}: unexpected outcome {other:?}"
            ))),
        }
    }

    fn guard(
        &self,
        name: &LockName,
        key: &str,
        owner: Uuid,
        token: i64,
        ttl: Duration,
        sent: SentAt,
    ) -> Result<LockGuard> {
        let notifier = LossNotifier::new();
        let unsigned = u64::try_from(token)
            .map_err(|_| Error::backend(format!("{key}: negative token {token}")))?;
        let grant = Grant::new(name.clone(), unsigned, key, ttl, sent)
            .with_notifier(notifier.clone())
            .renewed_by(&self.inner.renewer);
        distlock_core::raw::leased_guard(
            grant,
            PgLease {
                inner: self.inner.clone(),
                owner,
                key: key.to_owned(),
                token,
                ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
                notifier,
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

/// What a look that left the entry waiting found.
struct Waiting {
    /// In how many ms the first grant ahead runs out (zero or less: it ran
    /// out, but an open fenced transaction keeps it).
    first_ends_in: Option<i64>,
    /// The last token taken from the sequence during the look.
    last_token: i64,
}

/// One acquisition's fixed arguments.
struct Attempt<'a> {
    key: &'a str,
    owner: Uuid,
    access: Access,
    ttl_ms: i64,
    holder: &'a str,
    value: Option<&'a [u8]>,
    queue: bool,
}

/// The notified grant `granted` that the waiter may take, with the send
/// time its lease counts from: only one whose token is above the last
/// token its last waiting look saw (a lower one named an earlier entry of
/// the same owner id, granted and lost while the waiter could not hear of
/// it), and whose lease counted from that look has not run out here (the
/// waiter was paused: its next look renews the grant if it is still its
/// own).
fn notified_grant(
    granted: Option<i64>,
    waiting_since: &Option<(SentAt, i64)>,
    ttl: Duration,
) -> Option<(i64, SentAt)> {
    let (token, (sent, fence)) = (granted?, waiting_since.as_ref()?);
    (token > *fence && Validity::from_sent(sent, ttl).is_valid()).then(|| (token, sent.clone()))
}

/// What an acquisition asks for, for messages.
fn describe(access: Access, name: &LockName) -> String {
    match access {
        Access::Write => format!("lock {name}"),
        other => other.describe(name),
    }
}

fn capabilities(layout: Layout) -> Capabilities {
    let caps = Capabilities::new(POSTGRES, FencingStrength::Strong)
        .with_ttl_limits(MIN_TTL, Duration::from_millis(1));
    if layout == Layout::Advisory {
        // The server's lock queue is not promised to be FIFO; no election,
        // shared primitives or admin operations on sessions' locks.
        return caps;
    }
    caps.with_fifo(true)
        .with_election(true)
        .with_shared(true, true)
        .with_admin(AdminCapabilities::all())
}

#[async_trait]
impl LockBackend for PostgresBackend {
    /// Strong tokens from a sequence, FIFO, elections, semaphores,
    /// read-write locks, every admin operation.
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
    /// owner-checked) and wakes the next waiter. If that task cannot run,
    /// the entry expires after one TTL.
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
    /// the lock is not held). Its next renewal finds the entry gone and
    /// fires `Revoked`; the next grant's token comes from the same sequence,
    /// so it is higher.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have evicted the holder.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        self.table_only("force_release")?;
        crate::admin::force_release(self, name).await
    }
}
