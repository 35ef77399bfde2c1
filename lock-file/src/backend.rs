//! [`FileBackend`]: acquiring lock records, waiting by polling, and the guard.

use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::AdminCapabilities;
use distlock_core::raw::check_limit_agrees;
use distlock_core::raw::{Grant, LossNotifier, Renewer, SentAt};
use distlock_core::{
    Access, AcquireOptions, AcquireRequest, Capabilities, Error, FencingStrength, HolderInfo,
    ListOptions, ListPage, LockBackend, LockGuard, LockName, LockStatus, Result, Wait,
};
use tokio::time::{Instant, sleep_until, timeout};

use crate::attempt::AcquireCleanup;
use crate::case::{self, Case};
use crate::config::FileConfig;
use crate::errors::{Unfinished, dir_error, io_error, panicked, unfinished, unfinished_at};
use crate::flock::Bound;
use crate::held::FileLease;
use crate::keys::{LockPaths, Space};
use crate::place::Place;
use crate::renewals::{Answer, RenewalLane};
use crate::sharing::{self, MACHINE_DIR, Sharing};
use crate::store::{Attempt, Claim};
use crate::wakeups;

/// First poll interval of a waiter; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(1);
/// Longest poll interval: bounds a cross-process hand-off.
const MAX_BACKOFF: Duration = Duration::from_millis(20);
/// Longest poll interval of the waiter whose turn is next: the hand-off to
/// it from another process takes no longer. Its polls are plain reads.
const NEXT_MAX_BACKOFF: Duration = Duration::from_millis(2);
/// How long past its own bound a file operation may take to report that it
/// gave up, before the caller stops waiting for the report.
pub(crate) const REPORT_GRACE: Duration = Duration::from_millis(100);

/// Locks shared by every process that uses the same directory on this machine.
///
/// Cloning is cheap and shares the configuration; separate instances on the
/// same directory coordinate exactly like separate processes.
#[derive(Debug, Clone)]
pub struct FileBackend {
    config: Arc<FileConfig>,
    /// Whether the directory folds case, found at connect.
    case: Case,
    /// Whether other users share the directory, found at connect.
    sharing: Sharing,
    /// Renews the leases of every lock this backend grants, from one task per runtime.
    renewer: Renewer,
    /// Runs those renewals' file work, apart from acquisitions' (see [`RenewalLane`]).
    renewals: RenewalLane,
}

impl FileBackend {
    /// Checks `config`, creates its directory, and finds out whether the
    /// filesystem there folds case (then upper-case letters of lock names
    /// are escaped in file names, so `Job` and `job` stay separate locks).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: at worst the directory was created.
    pub async fn connect(config: FileConfig) -> Result<Self> {
        config.validate()?;
        let dir = config.dir.clone();
        let create = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || {
                if dir == Path::new(MACHINE_DIR) {
                    sharing::prepare_machine_dir(&dir)?;
                } else {
                    std::fs::create_dir_all(&dir)?;
                }
                let sharing = Sharing::of(&dir)?;
                let mut folds = false;
                for space in [Space::Lock, Space::Election] {
                    let space_dir = dir.join(space.dir());
                    sharing.create_dirs(&space_dir)?;
                    folds |= case::probe(&space_dir)? == Case::Insensitive;
                }
                let case = if folds {
                    Case::Insensitive
                } else {
                    Case::Sensitive
                };
                Ok::<_, std::io::Error>((case, sharing))
            }
        });
        let limit = config.request_timeout;
        let (case, sharing) = match timeout(limit, create).await {
            Ok(Ok(Ok(found))) => found,
            Ok(Ok(Err(e))) => return Err(dir_error(e, &dir)),
            Ok(Err(join)) => {
                let address = dir.display().to_string();
                return Err(unfinished_at(
                    &address,
                    "create the lock directory",
                    Unfinished::Failed(&join),
                ));
            }
            Err(_) => {
                let address = dir.display().to_string();
                return Err(unfinished_at(
                    &address,
                    "create the lock directory",
                    Unfinished::TookLonger(limit),
                ));
            }
        };
        if case == Case::Insensitive {
            tracing::info!(
                backend = "file",
                dir = %dir.display(),
                "the lock directory folds case; upper-case letters in lock names are escaped \
                 in file names"
            );
        }
        tracing::debug!(backend = "file", dir = %dir.display(), "file backend ready");
        Ok(FileBackend {
            renewals: RenewalLane::new(config.fsync),
            config: Arc::new(config),
            case,
            sharing,
            renewer: Renewer::new(),
        })
    }

    /// Connects to the backend a `file://` URL names, with the URL's options.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(FileConfig::from_url(url)?).await
    }

    /// The configuration in force.
    pub fn config(&self) -> &FileConfig {
        &self.config
    }

    /// The directory that holds the lock records.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// Ends the lease of whoever holds `name` (lock or election) right now, as
    /// if its TTL had run out. Returns whether there was a holder.
    ///
    /// This is how tests end a lease from outside (feature `testing`). The
    /// holder learns of it at its next renewal (within a third of its TTL)
    /// and the next contender gets a greater fencing token.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have ended the lease.
    #[cfg(feature = "testing")]
    pub async fn expire_now(&self, name: &LockName) -> Result<bool> {
        let mut any = false;
        for space in [Space::Lock, Space::Election] {
            let paths = self.paths(space, name);
            let fsync = self.config.fsync;
            let path = paths.record.clone();
            let p = paths.clone();
            let ended = self
                .blocking("expire", name, &path, move |bound| {
                    crate::store::expire(&p, fsync, bound)
                })
                .await?;
            if ended {
                wakeups::notify(&paths.record);
            }
            any |= ended;
        }
        Ok(any)
    }

    pub(crate) fn paths(&self, space: Space, name: &LockName) -> LockPaths {
        LockPaths::new(&self.config.dir, space, name, self.case).shared_as(self.sharing)
    }

    pub(crate) fn caps() -> Capabilities {
        Capabilities::new("file", FencingStrength::BestEffort)
            .with_fifo(false)
            .with_election(true)
            .with_shared(true, true)
            .with_cross_process(true)
            .with_ttl_limits(distlock_core::MIN_TTL, Duration::from_millis(1))
            .with_admin(AdminCapabilities::all())
    }

    /// Runs a blocking file operation off the runtime, bounded by the
    /// request timeout. `f` waits for the `flock` only within the bound it
    /// is given, and stops waiting if this future is dropped.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        op: &str,
        name: &LockName,
        path: &Path,
        f: impl FnOnce(&Bound) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T> {
        self.blocking_within(self.config.request_timeout, op, name, path, f)
            .await
    }

    /// Renews `holder`'s lease on `name` (files at `paths`) to now +
    /// `ttl_ms` in the renewal lane, bounded by the request timeout
    /// (waiting in the lane included). A renewal that panicked is a lost
    /// lease (`LeaseLost`). Dropping the future skips the renewal if no
    /// worker has started it yet.
    pub(crate) async fn renew_in_lane(
        &self,
        name: &LockName,
        paths: &LockPaths,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<std::result::Result<(), crate::store::Gone>> {
        let limit = self.config.request_timeout;
        let bound = Bound::within(limit);
        let _cancel = bound.cancel_on_drop();
        let answer = self
            .renewals
            .submit(paths.clone(), holder.to_owned(), ttl_ms, bound);
        let (op, path) = ("renew", &paths.record);
        match timeout(limit + REPORT_GRACE, answer).await {
            Ok(Ok(Answer::Done(renewed))) => renewed.map_err(|e| io_error(e, op, name, path)),
            Ok(Ok(Answer::Panicked(why))) => Err(panicked(op, name, path, &why)),
            Ok(Err(closed)) => Err(unfinished(op, name, path, Unfinished::Failed(&closed))),
            Err(_) => Err(unfinished(op, name, path, Unfinished::TookLonger(limit))),
        }
    }

    /// As [`FileBackend::blocking`], bounded by `limit`.
    pub(crate) async fn blocking_within<T: Send + 'static>(
        &self,
        limit: Duration,
        op: &str,
        name: &LockName,
        path: &Path,
        f: impl FnOnce(&Bound) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T> {
        let bound = Bound::within(limit);
        let _cancel = bound.cancel_on_drop();
        let task = tokio::task::spawn_blocking(move || f(&bound));
        match timeout(limit + REPORT_GRACE, task).await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(e))) => Err(io_error(e, op, name, path)),
            Ok(Err(join)) => Err(unfinished(op, name, path, Unfinished::Failed(&join))),
            Err(_) => Err(unfinished(op, name, path, Unfinished::TookLonger(limit))),
        }
    }

    /// Acquires `name` in `space`, publishing `value` for elections, inside
    /// distlock-core's `distlock.acquire` span and metrics. `access` is the
    /// permit or side of a read-write lock asked for in the shared spaces.
    pub(crate) async fn acquire_in(
        &self,
        space: Space,
        name: &LockName,
        options: &AcquireOptions,
        value: Option<Vec<u8>>,
        access: Option<Access>,
    ) -> Result<LockGuard> {
        let grant = async {
            let ttl = options.effective_ttl(self.config.default_ttl)?;
            let paths = self.paths(space, name);
            let holder = uuid::Uuid::new_v4().simple().to_string();
            let description = options.holder_description(self.config.holder.as_deref());
            let mut place = Place::new(self, &paths, &holder, Some(description.clone()), access);
            let claim = Claim {
                value,
                description: Some(description),
                access,
            };
            let acquired = self
                .poll_until_granted(
                    space, name, options, claim, &paths, &holder, ttl, &mut place,
                )
                .await;
            match &acquired {
                Ok(_) => place.granted(),
                Err(_) => place.leave(self, name).await,
            }
            acquired
        };
        distlock_core::raw::observe_acquire("file", name, grant).await
    }

    /// Attempts to take the lock until granted, keeping `place` in the
    /// waiters' queue while it waits.
    #[allow(clippy::too_many_arguments)]
    async fn poll_until_granted(
        &self,
        space: Space,
        name: &LockName,
        options: &AcquireOptions,
        claim: Claim,
        paths: &LockPaths,
        holder: &str,
        ttl: Duration,
        place: &mut Place,
    ) -> Result<LockGuard> {
        let start = Instant::now();
        let deadline = options.wait.deadline_from(start);
        let wake = wakeups::subscribe(&paths.record);
        let mut backoff = MIN_BACKOFF;
        loop {
            let mut notified = pin!(wake.notified());
            notified.as_mut().enable();
            let sent = Instant::now();
            // Validity counts from here, on the lease clock (through suspend).
            let stamped = SentAt::now();
            // Wait for the OS lock no longer than the caller waits for the
            // lock (but long enough for a normal transaction to finish);
            // `try_lock` gets the request timeout.
            let request = self.config.request_timeout;
            let limit = match (options.wait, deadline) {
                (Wait::No, _) | (_, None) => request,
                (_, Some(d)) => d
                    .saturating_duration_since(sent)
                    .clamp(MAX_BACKOFF, request),
            };
            let mut attempt = AcquireCleanup::start(self, paths, holder, ttl, claim.clone(), limit);
            let (remaining, max_backoff) = match attempt.outcome(name).await? {
                Attempt::Granted { token } => {
                    if space == Space::Election {
                        wakeups::notify(&paths.record);
                    }
                    let (paths, holder) = (paths.clone(), holder.to_owned());
                    return self.guard(space, name, paths, holder, token, ttl, stamped);
                }
                Attempt::Held { remaining_ms, next } => (
                    Some(remaining_ms),
                    if next { NEXT_MAX_BACKOFF } else { MAX_BACKOFF },
                ),
                Attempt::Queued => (None, MAX_BACKOFF),
                Attempt::Refused { theirs } => {
                    // `theirs` is not the limit asked for: this is the error.
                    let asked = claim.access.unwrap_or(Access::Write);
                    check_limit_agrees(name, asked, &[Access::Permit(theirs)])?;
                    (None, MAX_BACKOFF)
                }
            };
            let now = Instant::now();
            let dir = self.config.dir.display();
            let what = match claim.access {
                Some(access) => access.describe(name),
                None => format!("lock {name}"),
            };
            if options.wait == Wait::No {
                return Err(Error::would_block(match remaining {
                    Some(ms) => format!(
                        "{what} is held by another holder (file backend, {dir}); its lease \
                         runs for up to {ms} ms more unless renewed"
                    ),
                    None => format!(
                        "{what} is free but it is the turn of a waiter that came first \
                         (file backend, {dir}); wait for it instead of trying once"
                    ),
                }));
            }
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::timeout(format!(
                    "{what} still held by another holder (or promised to an earlier \
                     waiter) after waiting {:?} (file backend, {dir})",
                    now - start
                )));
            }
            if place.is_due() {
                place.keep(self, name, limit).await?;
            }
            backoff = backoff.min(max_backoff);
            let mut wake_at =
                now + backoff.min(Duration::from_millis(remaining.unwrap_or(u64::MAX)));
            if let Some(d) = deadline {
                wake_at = wake_at.min(d);
            }
            tokio::select! {
                _ = notified => backoff = MIN_BACKOFF,
                _ = sleep_until(wake_at) => backoff = (backoff * 2).min(max_backoff),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        space: Space,
        name: &LockName,
        paths: LockPaths,
        holder: String,
        token: u64,
        ttl: Duration,
        sent: SentAt,
    ) -> Result<LockGuard> {
        let key = format!("{}#{token}", paths.record.display());
        let notifier = LossNotifier::new();
        let lease = FileLease {
            backend: self.clone(),
            space,
            name: name.clone(),
            paths,
            holder,
            token,
            ttl,
            notifier: notifier.clone(),
        };
        tracing::debug!(backend = "file", lock = %name, token, "acquired");
        let grant = Grant::new(name.clone(), token, key, ttl, sent)
            .with_notifier(notifier)
            .renewed_by(&self.renewer);
        distlock_core::raw::leased_guard(grant, lease)
    }
}

#[async_trait]
impl LockBackend for FileBackend {
    fn capabilities(&self) -> Capabilities {
        Self::caps()
    }

    fn default_ttl(&self) -> Duration {
        self.config.default_ttl
    }

    /// Acquires `name`, polling while another holder's lease runs; or a
    /// permit of the semaphore `name`, or a side of the read-write lock
    /// `name`, polling while the grants and the waiters ahead of it keep it
    /// out (its record is in a space of its own).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a waiting lock leaves nothing on disk, and a dropped
    /// waiter's queue place is removed in the background (and lapses in
    /// 400 ms anyway). If the future is dropped while an attempt is in
    /// flight and that attempt turns out to have taken the lock, a
    /// background task releases it at once (the TTL is the backstop if the
    /// process exits first).
    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        let space = request.access.map_or(Space::Lock, Space::shared);
        self.acquire_in(space, request.name, request.options, None, request.access)
            .await
    }

    /// The holder and waiters of `name`'s lock (or of its election, if only
    /// that is in use), read from its record and queue.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        Ok(self.status_of(name).await?.1)
    }

    /// The locks and elections held or waited for under `options.prefix`,
    /// found by walking the directory.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        self.list_page(options).await
    }

    /// Frees `name`, keeping its fencing counter; the evicted guard learns
    /// at its next renewal (within a third of its TTL).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have evicted the holder.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        self.break_lock(name).await
    }
}
