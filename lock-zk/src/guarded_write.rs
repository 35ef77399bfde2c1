//! Writes that commit only while a lock is held: a ZooKeeper `multi` whose
//! first operation checks that our lock node still exists.
//!
//! A lock node is unique to one acquisition and ephemeral, so "it exists"
//! means "this acquisition still holds the lock". The check and the writes
//! commit atomically on the server: a holder that lost its lock (session
//! expired, node deleted) cannot write, however late its request arrives.

use std::fmt;
use std::sync::Arc;

use distlock_core::{ErrorKind, Leadership, LockGuard, Result};
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::errors::{ZkSite, in_doubt};
use crate::session::Session;

/// The lock (or leadership) a write is guarded by.
#[derive(Debug, Clone, Copy)]
enum Holder<'g> {
    Lock(&'g LockGuard),
    Leader(&'g Leadership),
}

impl Holder<'_> {
    /// The guard behind the lock or the leadership.
    fn guard(&self) -> &LockGuard {
        match self {
            Holder::Lock(guard) => guard,
            Holder::Leader(leadership) => leadership.guard(),
        }
    }

    fn key(&self) -> &str {
        self.guard().key()
    }

    fn is_held(&self) -> bool {
        self.guard().is_held()
    }

    fn describe(&self) -> String {
        let what = match self {
            Holder::Lock(_) => "lock",
            Holder::Leader(_) => "leadership of",
        };
        let guard = self.guard();
        format!("{what} {} (token {})", guard.name(), guard.token())
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        path: String,
        data: Vec<u8>,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
    Check {
        path: String,
        version: i32,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create { path, .. } => write!(f, "create {path}"),
            Op::SetData { path, .. } => write!(f, "set data of {path}"),
            Op::Delete { path, .. } => write!(f, "delete {path}"),
            Op::Check { path, version } => write!(f, "check {path} is at version {version}"),
        }
    }
}

/// What one operation of a committed [`GuardedWrite`] did, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// A node was created at this path.
    Created {
        /// The created node's path.
        path: String,
    },
    /// A node's data was replaced; this is its new version.
    Updated {
        /// The node's data version after the write.
        version: i32,
    },
    /// A node was deleted.
    Deleted,
    /// A version check passed.
    Checked,
}

/// A transaction that commits only while a lock is held.
///
/// Build it with [`ZkBackend::guarded_write`] (or
/// [`ZkBackend::guarded_write_as_leader`]), add operations on absolute paths,
/// and [`commit`](Self::commit). Nothing is written if the lock is gone.
///
/// ```no_run
/// # async fn demo(backend: distlock_zk::ZkBackend) -> distlock_core::Result<()> {
/// use distlock_core::LockBackendExt;
///
/// let guard = backend.lock("inventory").await?;
/// backend
///     .guarded_write(&guard)
///     .set_data("/app/inventory/apples", b"41".to_vec(), None)
///     .create(format!("/app/audit/entry-{}", guard.token()), b"took one".to_vec())
///     .commit()
///     .await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a guarded write does nothing until committed"]
pub struct GuardedWrite<'g> {
    session: Arc<Session>,
    holder: Holder<'g>,
    ops: Vec<Op>,
}

impl ZkBackend {
    /// Starts a write that commits only while `guard` holds its lock.
    pub fn guarded_write<'g>(&self, guard: &'g LockGuard) -> GuardedWrite<'g> {
        GuardedWrite {
            session: self.current(),
            holder: Holder::Lock(guard),
            ops: Vec::new(),
        }
    }

    /// Starts a write that commits only while `leadership` leads.
    pub fn guarded_write_as_leader<'g>(&self, leadership: &'g Leadership) -> GuardedWrite<'g> {
        GuardedWrite {
            session: self.current(),
            holder: Holder::Leader(leadership),
            ops: Vec::new(),
        }
    }
}

impl GuardedWrite<'_> {
    /// Creates a persistent node (with the backend's ACLs).
    pub fn create(mut self, path: impl Into<String>, data: Vec<u8>) -> Self {
        self.ops.push(Op::Create {
            path: path.into(),
            data,
        });
        self
    }

    /// Replaces a node's data, if its version is `version` (any version for `None`).
    pub fn set_data(
        mut self,
        path: impl Into<String>,
        data: Vec<u8>,
        version: Option<i32>,
    ) -> Self {
        self.ops.push(Op::SetData {
            path: path.into(),
            data,
            version,
        });
        self
    }

    /// Deletes a node, if its version is `version` (any version for `None`).
    pub fn delete(mut self, path: impl Into<String>, version: Option<i32>) -> Self {
        self.ops.push(Op::Delete {
            path: path.into(),
            version,
        });
        self
    }

    /// Requires a node to be at `version` for the write to commit.
    pub fn check_version(mut self, path: impl Into<String>, version: i32) -> Self {
        self.ops.push(Op::Check {
            path: path.into(),
            version,
        });
        self
    }

    /// Commits the check on our lock node and every operation, atomically.
    ///
    /// Fails with `LeaseLost` (and writes nothing) if the lock is no longer
    /// held; with `Backend` naming the operation if one of them fails (a
    /// missing node, a version mismatch); with `Unavailable` or `Timeout` if
    /// the reply was lost, in which case the write may or may not have
    /// committed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled commit may or may not have been applied
    /// (atomically, and only while the lock was held).
    pub async fn commit(self) -> Result<Vec<WriteOutcome>> {
        let action = format!("guarded write under {}", self.holder.describe());
        let doing = crate::errors::doing(&action, &self.session.settings.connect_string);
        if !self.holder.is_held() {
            return Err(doing.error(
                ErrorKind::LeaseLost,
                "the lock is no longer held; nothing was written",
            ));
        }
        let lock_path = self.holder.key().to_owned();
        let mut writer = self.session.client.new_multi_writer();
        let acls = self.session.acls();
        let persistent = zk::CreateMode::Persistent.with_acls(acls);
        let mut build = || -> Result<(), zk::Error> {
            writer.add_check_version(&lock_path, -1)?;
            for op in &self.ops {
                match op {
                    Op::Create { path, data } => writer.add_create(path, data, &persistent)?,
                    Op::SetData {
                        path,
                        data,
                        version,
                    } => writer.add_set_data(path, data, *version)?,
                    Op::Delete { path, version } => writer.add_delete(path, *version)?,
                    Op::Check { path, version } => writer.add_check_version(path, *version)?,
                }
            }
            Ok(())
        };
        if let Err(e) = build() {
            return Err(doing
                .error(ErrorKind::InvalidConfig, format!("bad operation: {e}"))
                .with_source(e));
        }
        let result = tokio::time::timeout(self.session.timing.request, writer.commit()).await;
        let results = match result {
            Err(_) => {
                return Err(doing.error(
                    ErrorKind::Timeout,
                    "no reply in time; the write may or may not have committed",
                ));
            }
            Ok(Ok(results)) => results,
            Ok(Err(zk::MultiWriteError::OperationFailed { index: 0, source })) => {
                return Err(doing
                    .error(ErrorKind::LeaseLost,
                        format!("lock node {lock_path} is gone ({source}), so the lock is lost; nothing was written"),
                    )
                    .with_source(source));
            }
            Ok(Err(zk::MultiWriteError::OperationFailed { index, source })) => {
                let op = &self.ops[index - 1];
                let kind = if matches!(source, zk::Error::NoAuth) {
                    ErrorKind::Unauthorized
                } else {
                    ErrorKind::Backend
                };
                return Err(doing
                    .error(
                        kind,
                        format!(
                            "operation {} ({op}) failed: {source}; nothing was written",
                            index - 1
                        ),
                    )
                    .with_source(source));
            }
            Ok(Err(zk::MultiWriteError::RequestFailed { source })) if in_doubt(&source) => {
                return Err(doing
                    .error(
                        ErrorKind::Unavailable,
                        format!("{source}; the write may or may not have committed"),
                    )
                    .with_source(source));
            }
            Ok(Err(zk::MultiWriteError::RequestFailed { source })) => {
                return Err(doing.client_error(source));
            }
        };
        Ok(results.into_iter().skip(1).map(outcome).collect())
    }
}

fn outcome(result: zk::MultiWriteResult) -> WriteOutcome {
    match result {
        zk::MultiWriteResult::Create { path, .. } => WriteOutcome::Created { path },
        zk::MultiWriteResult::SetData { stat } => WriteOutcome::Updated {
            version: stat.version,
        },
        zk::MultiWriteResult::Delete => WriteOutcome::Deleted,
        _ => WriteOutcome::Checked,
    }
}

/// The guarded writes every backend with them offers under the same names
/// (`guarded_put`, `guarded_delete`, `is_owner`), each one
/// [`GuardedWrite`] of a single operation.
impl ZkBackend {
    /// Sets the data of the node at `path` (an absolute path whose parent
    /// exists), creating it if missing, only while `guard` (of a lock or a
    /// leadership from this backend) still holds it: a `multi` checks the
    /// lock node with the write. If another writer created or deleted the
    /// node in between, it tries the other way once.
    ///
    /// Fails as [`GuardedWrite::commit`]: `LeaseLost`, writing nothing, once
    /// the lock is gone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled write may or may not have been
    /// committed (atomically, and only while the lock was held).
    pub async fn guarded_put(
        &self,
        guard: &LockGuard,
        path: &str,
        value: impl Into<Vec<u8>>,
    ) -> Result<()> {
        let value = value.into();
        let mut exists = self.stat(guard, path, "guarded_put").await?.is_some();
        for attempt in 0..2 {
            let write = if exists {
                self.guarded_write(guard)
                    .set_data(path, value.clone(), None)
            } else {
                self.guarded_write(guard).create(path, value.clone())
            };
            match write.commit().await {
                Ok(_) => return Ok(()),
                Err(e) if attempt == 0 && e.kind() == ErrorKind::Backend => exists = !exists,
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Deletes the node at `path` if it exists, only while `guard` holds
    /// its lock (a missing node commits the lock check alone, so a lost
    /// lock is `LeaseLost` either way); whether the node existed.
    ///
    /// # Cancel safety
    ///
    /// As [`guarded_put`](Self::guarded_put).
    pub async fn guarded_delete(&self, guard: &LockGuard, path: &str) -> Result<bool> {
        let mut exists = self.stat(guard, path, "guarded_delete").await?.is_some();
        for attempt in 0..2 {
            let write = if exists {
                self.guarded_write(guard).delete(path, None)
            } else {
                self.guarded_write(guard)
            };
            match write.commit().await {
                Ok(_) => return Ok(exists),
                Err(e) if attempt == 0 && e.kind() == ErrorKind::Backend => exists = !exists,
                Err(e) => return Err(e),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Asks ZooKeeper whether `guard`'s lock node still exists (it is unique
    /// to the acquisition and ephemeral). A `true` may be stale by the time
    /// it is read; to act on it, use [`guarded_put`](Self::guarded_put).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_owner(&self, guard: &LockGuard) -> Result<bool> {
        let stat = self.stat(guard, guard.key(), "is_owner").await?;
        Ok(stat.is_some_and(|s| s.ephemeral_owner != 0))
    }

    /// The stat of `path`, if it exists, within the request timeout.
    async fn stat(&self, guard: &LockGuard, path: &str, action: &str) -> Result<Option<zk::Stat>> {
        let client = self.client();
        let reply =
            tokio::time::timeout(self.config().request_timeout, client.check_stat(path)).await;
        let context = || {
            format!(
                "{action} under {}: reading {path}",
                Holder::Lock(guard).describe()
            )
        };
        match reply {
            Err(_) => Err(distlock_core::Error::timeout(format!(
                "{}: no reply in time",
                context()
            ))
            .with_site("zk", action.to_owned())),
            Ok(Err(e)) => Err(
                distlock_core::Error::unavailable(format!("{}: {e}", context()))
                    .with_site("zk", action.to_owned())
                    .with_source(e),
            ),
            Ok(Ok(stat)) => Ok(stat),
        }
    }
}

distlock_core::guarded_writes_by_inherent_methods!(ZkBackend);
