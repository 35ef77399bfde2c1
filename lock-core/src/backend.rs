//! The lock backend trait, written for implementors, and its convenience extension.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::access::Access;
use crate::admin::{HolderInfo, ListOptions, ListPage, ListedLock, LockStatus};
use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::{Held, LockGuard};
use crate::multi::{self, MultiLockGuard};
use crate::name::LockName;
use crate::options::{AcquireOptions, Wait};

/// One acquisition asked of a [`LockBackend`]: the lock of `name`, or an
/// [`Access`] to its semaphore or read-write lock, with `options`.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The name to acquire.
    pub name: &'a LockName,
    /// `None` for the lock of `name`; else the access to its semaphore or
    /// read-write lock.
    pub access: Option<Access>,
    /// TTL, wait, holder description.
    pub options: &'a AcquireOptions,
}

impl<'a> AcquireRequest<'a> {
    /// The lock of `name`.
    pub fn lock(name: &'a LockName, options: &'a AcquireOptions) -> Self {
        AcquireRequest {
            name,
            access: None,
            options,
        }
    }

    /// `Unsupported` for this request on a backend with `caps` that has
    /// none of what it asks for.
    pub fn unsupported(&self, caps: &Capabilities) -> Error {
        let (missing, operation) = match self.access {
            Some(Access::Permit(_)) => ("semaphores", "acquire_as"),
            Some(_) => ("read-write locks", "acquire_as"),
            None => (
                "locks (it implements neither acquire nor acquire_request)",
                "acquire",
            ),
        };
        Error::unsupported(format!("the {} backend has no {missing}", caps.backend))
            .with_site(caps.backend, operation.to_owned())
    }

    /// `access` to the semaphore or read-write lock `name`.
    pub fn shared(name: &'a LockName, access: Access, options: &'a AcquireOptions) -> Self {
        AcquireRequest {
            name,
            access: Some(access),
            options,
        }
    }
}

/// A distributed lock service: etcd, Redis, ZooKeeper, PostgreSQL, a file,
/// or memory.
///
/// The trait is object safe; the backend is usually chosen at run time and
/// held as `Arc<DynLockBackend>`. A backend implements
/// [`acquire_request`](LockBackend::acquire_request), which serves both
/// [`acquire`](LockBackend::acquire) and
/// [`acquire_as`](LockBackend::acquire_as); the convenience forms live in
/// [`LockBackendExt`].
///
/// # Contract
///
/// - At most one [`LockGuard`] for a name is held at any time, across all
///   clients of the same service, while their leases are valid.
/// - Every successful acquisition returns a [`FencingToken`](crate::FencingToken)
///   greater than every earlier one for the same name (see its contract).
/// - Names are validated before any I/O (they arrive as [`LockName`]).
/// - A zero TTL is rejected with `InvalidConfig`.
/// - Every network call has a timeout: no method hangs past its wait plus the
///   backend's request timeout.
#[async_trait]
pub trait LockBackend: fmt::Debug + Send + Sync + 'static {
    /// What this backend promises.
    fn capabilities(&self) -> Capabilities;

    /// The default lease TTL used when [`AcquireOptions::ttl`] is `None`.
    fn default_ttl(&self) -> Duration;

    /// Acquires `name`, waiting as `options.wait` allows.
    ///
    /// Fails with `WouldBlock` ([`Wait::No`]) or `Timeout` ([`Wait::Timeout`])
    /// when the lock stays held by someone else.
    ///
    /// The default is [`acquire_request`](Self::acquire_request) for the
    /// lock of `name`.
    ///
    /// # Cancel safety
    ///
    /// Cancelling (dropping) the future gives up the attempt and its place in
    /// the queue. Any entry it left on the server is deleted in the background
    /// and in any case expires with its lease, so it never blocks other
    /// contenders beyond the TTL.
    async fn acquire(&self, name: &LockName, options: &AcquireOptions) -> Result<LockGuard> {
        self.acquire_request(AcquireRequest::lock(name, options))
            .await
    }

    /// Acquires `name` as a semaphore permit, a reader or the writer of a
    /// read-write lock, waiting as `options.wait` allows.
    ///
    /// The guard is a [`LockGuard`] like a lock's: a lease renewed in the
    /// background, a fencing token, a lost signal, owner-checked release.
    ///
    /// - [`Access::Permit`]: at most its limit of holders at once, across
    ///   every client. A limit that differs from the one of the permits
    ///   already held or queued is `InvalidConfig`, naming both.
    /// - [`Access::Read`]: any number of readers at once, never with a
    ///   writer. [`Access::Write`]: alone. A reader that arrives after a
    ///   waiting writer waits for it, so writers never starve.
    ///
    /// Every grant of a name, whatever its access, takes its token from one
    /// sequence, in grant order (see [`Access`](crate::Access)). Semaphores,
    /// read-write locks and mutexes of one name are independent.
    /// [`Capabilities::semaphore`] and [`Capabilities::rwlock`] say what the
    /// backend offers. The default is
    /// [`acquire_request`](Self::acquire_request) for `access`.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): cancelling gives up the attempt and
    /// its place in the queue, and never blocks others beyond the TTL.
    async fn acquire_as(
        &self,
        name: &LockName,
        access: Access,
        options: &AcquireOptions,
    ) -> Result<LockGuard> {
        self.acquire_request(AcquireRequest::shared(name, access, options))
            .await
    }

    /// Acquires what `request` asks for: the one method a backend
    /// implements for [`acquire`](Self::acquire) and
    /// [`acquire_as`](Self::acquire_as) both, which are this method by
    /// default. The default is `Unsupported`.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): cancelling gives up the attempt and
    /// its place in the queue, and never blocks others beyond the TTL.
    async fn acquire_request(&self, request: AcquireRequest<'_>) -> Result<LockGuard> {
        Err(request.unsupported(&self.capabilities()))
    }

    /// The holder of `name` and its waiters, as an operator needs them.
    ///
    /// [`Capabilities::admin`] says which fields this backend fills. The
    /// default is `Unsupported`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let _ = name;
        Err(admin_unsupported(&self.capabilities(), "inspect"))
    }

    /// One page of the locks and elections that exist under
    /// `options.prefix`, held or waited for. Loop with
    /// [`LockBackendExt::list_all`] for every page.
    ///
    /// The default is `Unsupported`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        let _ = options;
        Err(admin_unsupported(&self.capabilities(), "list"))
    }

    /// Breaks `name`: removes its holder, whoever it is, and returns what
    /// it was (`None` if nobody held it).
    ///
    /// For an operator whose job is stuck behind a holder that is alive but
    /// not progressing. The next grant's token is greater than the evicted
    /// one's, so a fenced resource rejects the evicted holder's late writes,
    /// and the evicted guard fires its lost signal with
    /// [`LostReason::Revoked`](crate::LostReason::Revoked) within the
    /// backend's usual detection bound. Waiters stay queued.
    ///
    /// The default is `Unsupported`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may or may not have evicted the holder.
    async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        let _ = name;
        Err(admin_unsupported(&self.capabilities(), "force_release"))
    }
}

fn admin_unsupported(caps: &Capabilities, operation: &str) -> Error {
    Error::unsupported(format!(
        "the {} backend does not implement {operation}",
        caps.backend
    ))
    .with_site(caps.backend, operation.to_owned())
}

/// A lock backend chosen at run time.
pub type DynLockBackend = dyn LockBackend;

/// Convenience methods for every [`LockBackend`], taking names as strings.
#[async_trait]
pub trait LockBackendExt: LockBackend {
    /// Acquires `name` if it is free right now, else fails with `WouldBlock`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`].
    async fn try_lock(&self, name: &str) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        let options = AcquireOptions::new().wait(Wait::No);
        self.acquire(&name, &options).await
    }

    /// Acquires `name`, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`]: cancelling loses the place in the queue.
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        self.acquire(&name, &AcquireOptions::new()).await
    }

    /// Acquires `name`, waiting at most `wait`, else fails with `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`]: cancelling loses the place in the queue.
    async fn lock_timeout(&self, name: &str, wait: Duration) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        let options = AcquireOptions::new().wait(Wait::Timeout(wait));
        self.acquire(&name, &options).await
    }

    /// One of `limit` permits of the semaphore `name`, waiting as long as
    /// it takes.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`]: cancelling loses the place in the queue.
    async fn permit(&self, name: &str, limit: u32) -> Result<LockGuard> {
        let access = Access::permit(limit)?;
        self.shared_with(name, access, &AcquireOptions::new()).await
    }

    /// One of `limit` permits of the semaphore `name` if one is free right
    /// now, else `WouldBlock`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`].
    async fn try_permit(&self, name: &str, limit: u32) -> Result<LockGuard> {
        let access = Access::permit(limit)?;
        let options = AcquireOptions::new().wait(Wait::No);
        self.shared_with(name, access, &options).await
    }

    /// The read side of the read-write lock `name`, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`]: cancelling loses the place in the queue.
    async fn read_lock(&self, name: &str) -> Result<LockGuard> {
        self.shared_with(name, Access::Read, &AcquireOptions::new())
            .await
    }

    /// The read side of the read-write lock `name` if no writer holds it or
    /// waits for it right now, else `WouldBlock`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`].
    async fn try_read_lock(&self, name: &str) -> Result<LockGuard> {
        let options = AcquireOptions::new().wait(Wait::No);
        self.shared_with(name, Access::Read, &options).await
    }

    /// The write side of the read-write lock `name`, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`]: cancelling loses the place in the queue.
    async fn write_lock(&self, name: &str) -> Result<LockGuard> {
        self.shared_with(name, Access::Write, &AcquireOptions::new())
            .await
    }

    /// The write side of the read-write lock `name` if nobody holds or waits
    /// for the lock right now, else `WouldBlock`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`].
    async fn try_write_lock(&self, name: &str) -> Result<LockGuard> {
        let options = AcquireOptions::new().wait(Wait::No);
        self.shared_with(name, Access::Write, &options).await
    }

    /// [`LockBackend::acquire_as`] with the name as a string.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire_as`].
    async fn shared_with(
        &self,
        name: &str,
        access: Access,
        options: &AcquireOptions,
    ) -> Result<LockGuard> {
        let name = LockName::new(name)?;
        self.acquire_as(&name, access, options).await
    }

    /// Acquires every lock of `names` as one [`MultiLockGuard`],
    /// all-or-nothing, with `options.wait` bounding the whole acquisition.
    ///
    /// Members are taken sorted by name, so sets that overlap never
    /// deadlock. An empty set or a name given twice is `InvalidConfig`, and
    /// a bad name `InvalidName`, before any I/O. When a member cannot be
    /// taken, the members already taken are released first and the error
    /// (of that member's kind) names it.
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the members already taken, which release in the
    /// background, and gives up the member being waited for as
    /// [`LockBackend::acquire`] does: it never blocks others beyond the TTL.
    async fn acquire_all(
        &self,
        names: &[LockName],
        options: &AcquireOptions,
    ) -> Result<MultiLockGuard> {
        multi::acquire_all(names.to_vec(), options, |name, member| async move {
            self.acquire(&name, &member).await
        })
        .await
    }

    /// [`acquire_all`](Self::acquire_all) with names as strings.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire_all`](Self::acquire_all).
    async fn lock_all_with(
        &self,
        names: &[&str],
        options: &AcquireOptions,
    ) -> Result<MultiLockGuard> {
        let names = multi::parse_set(names)?;
        self.acquire_all(&names, options).await
    }

    /// Acquires every lock of `names` if all are free right now, else
    /// fails with `WouldBlock` naming a busy one and holds none.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire_all`](Self::acquire_all).
    async fn try_lock_all(&self, names: &[&str]) -> Result<MultiLockGuard> {
        let options = AcquireOptions::new().wait(Wait::No);
        self.lock_all_with(names, &options).await
    }

    /// Acquires every lock of `names`, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire_all`](Self::acquire_all).
    async fn lock_all(&self, names: &[&str]) -> Result<MultiLockGuard> {
        self.lock_all_with(names, &AcquireOptions::new()).await
    }

    /// Acquires every lock of `names` within `wait` in all, else fails with
    /// `Timeout` naming a busy one and holds none.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire_all`](Self::acquire_all).
    async fn lock_all_timeout(&self, names: &[&str], wait: Duration) -> Result<MultiLockGuard> {
        let options = AcquireOptions::new().wait(Wait::Timeout(wait));
        self.lock_all_with(names, &options).await
    }

    /// Every lock and election under `prefix`, page after page.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ListedLock>> {
        let mut options = ListOptions::prefix(prefix);
        let mut all = Vec::new();
        loop {
            let page = self.list(&options).await?;
            all.extend(page.locks);
            match page.next {
                Some(next) => options = options.after(Some(next)),
                None => return Ok(all),
            }
        }
    }

    /// Runs `work` while holding `name`, then releases the lock before
    /// returning, whatever `work` returned.
    ///
    /// `work` gets a [`Held`] with the fencing token to pass to what it
    /// writes, and the lost signal to stop early on. Returns `work`'s value,
    /// or `LeaseLost` if the lock was lost before `work` finished (its
    /// writes may then have raced another holder's; fenced writes were
    /// rejected). A release whose outcome is unknown (the server is
    /// unreachable) is logged, and the lease TTL frees the lock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// use distlock_core::{LockBackendExt, memory::MemoryBackend};
    ///
    /// let backend = MemoryBackend::new();
    /// let token = backend
    ///     .with_lock("reports/nightly", |held| async move { held.token() })
    ///     .await?;
    /// // Released already: the next holder gets in at once, with a higher token.
    /// let next = backend.try_lock("reports/nightly").await?;
    /// assert!(next.token() > token);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancelling while waiting loses the place in the queue, as
    /// [`lock`](Self::lock). Cancelling while `work` runs drops it and
    /// releases the lock in the background (see [`LockGuard`]'s notes on
    /// dropping).
    async fn with_lock<F, Fut, T>(&self, name: &str, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let guard = self.lock(name).await?;
        let value = work(guard.held_view()).await;
        if !guard.is_held() {
            let reason = guard.lost_signal().reason();
            let token = guard.token();
            drop(guard);
            return Err(Error::lease_lost(format!(
                "lock {name} (token {token}) was lost before the work finished ({}); do not \
                 trust unfenced writes it made",
                reason.map_or_else(|| "validity deadline passed".to_owned(), |r| r.to_string())
            )));
        }
        match guard.release().await {
            Ok(()) => Ok(value),
            Err(e) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => {
                Err(Error::lease_lost(format!(
                    "lock {name} was lost before the work finished: {e}"
                )))
            }
            Err(e) => {
                tracing::warn!(lock = name, error = %e, "release failed after the work finished; the TTL will free the lock");
                Ok(value)
            }
        }
    }

    /// [`with_lock`](Self::with_lock) for `work` that can fail: its
    /// `Result` is returned as is instead of inside the lock's, so `?`
    /// gives the value and an error of `work` is not silently kept.
    ///
    /// Like `with_lock` it waits for the lock (the `try` is about `work`,
    /// as in `try_for_each`; [`try_lock`](Self::try_lock) is the one that
    /// does not wait). `E` is the caller's error type, which takes the
    /// lock's errors through `From<Error>` (`Box<dyn Error>` and `anyhow`
    /// do). A lock lost before `work` finished is `LeaseLost`, even when
    /// `work` also failed: its writes may have raced another holder's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use distlock_core::{LockBackendExt, memory::MemoryBackend};
    ///
    /// let backend = MemoryBackend::new();
    /// let rows: u64 = backend
    ///     .try_with_lock("jobs/nightly", |held| async move {
    ///         // A fenced write that may fail with the caller's error type.
    ///         let _token = held.token();
    ///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(3)
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Self::with_lock): cancelling while waiting loses
    /// the place in the queue; cancelling while `work` runs drops it and
    /// releases the lock in the background.
    async fn try_with_lock<F, Fut, T, E>(&self, name: &str, work: F) -> Result<T, E>
    where
        F: FnOnce(Held) -> Fut + Send,
        Fut: Future<Output = Result<T, E>> + Send,
        T: Send,
        E: From<Error> + Send,
    {
        self.with_lock(name, work).await.map_err(E::from)?
    }
}

impl<T: LockBackend + ?Sized> LockBackendExt for T {}
