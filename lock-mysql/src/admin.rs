//! The operator's view: inspect, list and force_release, from the rows of
//! `entries` whose lease has not run out.

use std::time::{Duration, UNIX_EPOCH};

use distlock_core::WaiterInfo;
use distlock_core::{
    FencingToken, HolderInfo, ListOptions, ListPage, ListedLock, LockName, LockStatus, Result,
};
use mysql_async::prelude::Queryable;

use crate::backend::MysqlBackend;
use crate::keys::{self, Space};

/// One entry as the view columns read it.
pub(crate) type ViewRow = (
    Vec<u8>,
    bool,
    Option<u64>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
);

/// One entry as an operator sees it.
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) granted: bool,
    pub(crate) token: Option<u64>,
    pub(crate) holder: Option<String>,
    pub(crate) value: Option<Vec<u8>>,
    granted_at_us: Option<i64>,
    lease_left_us: Option<i64>,
}

impl Entry {
    pub(crate) fn from_row(row: ViewRow) -> Self {
        let (key, granted, token, holder, value, granted_at_us, lease_left_us) = row;
        Entry {
            key: String::from_utf8_lossy(&key).into_owned(),
            granted,
            token,
            holder: holder.map(|h| String::from_utf8_lossy(&h).into_owned()),
            value,
            granted_at_us,
            lease_left_us,
        }
    }

    /// The holder; an election's is described by its published value.
    fn holder_info(&self, space: Space) -> HolderInfo {
        let description = match space {
            Space::Election => self
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            _ => self.holder.clone(),
        };
        HolderInfo {
            key: self.key.clone(),
            token: FencingToken(self.token.unwrap_or(0)),
            description,
            acquired_at: self
                .granted_at_us
                .and_then(|us| u64::try_from(us).ok())
                .map(|us| UNIX_EPOCH + Duration::from_micros(us)),
            lease_left: self
                .lease_left_us
                .and_then(|us| u64::try_from(us).ok())
                .map(Duration::from_micros),
        }
    }
}

/// The live entries of `key`, in arrival order.
pub(crate) async fn entries(backend: &MysqlBackend, key: &str) -> Result<Vec<Entry>> {
    let sql = &backend.inner.sql.entries_of;
    let rows: Vec<ViewRow> = backend
        .inner
        .pool
        .run(&format!("inspect {key}"), |mut conn| async move {
            conn.exec(sql, (key.as_bytes(),)).await
        })
        .await?;
    Ok(rows.into_iter().map(Entry::from_row).collect())
}

fn status(name: &LockName, space: Space, entries: &[Entry]) -> LockStatus {
    let mut status = LockStatus::free(name.clone());
    status.primitive = space.primitive();
    status.holder = entries
        .iter()
        .find(|e| e.granted)
        .map(|e| e.holder_info(space));
    status.waiters = entries
        .iter()
        .filter(|e| !e.granted)
        .map(|e| WaiterInfo {
            key: Some(e.key.clone()),
            description: e.holder.clone(),
        })
        .collect();
    status.waiting = status.waiters.len();
    status
}

/// The lock of `name`, or its election when only that is in use.
pub(crate) async fn inspect(backend: &MysqlBackend, name: &LockName) -> Result<LockStatus> {
    let lock = entries(backend, &backend.key(Space::Lock, name)).await?;
    if !lock.is_empty() {
        return Ok(status(name, Space::Lock, &lock));
    }
    let election = entries(backend, &backend.key(Space::Election, name)).await?;
    if !election.is_empty() {
        return Ok(status(name, Space::Election, &election));
    }
    Ok(LockStatus::free(name.clone()))
}

/// Every queue under `options.prefix` that has a live entry.
pub(crate) async fn list(backend: &MysqlBackend, options: &ListOptions) -> Result<ListPage> {
    let prefix = backend.inner.config.prefix.clone();
    let sql = &backend.inner.sql.keys_under;
    let rows: Vec<(Vec<u8>, Option<u64>, Option<i64>)> = backend
        .inner
        .pool
        .run("list the locks", |mut conn| async move {
            conn.exec(sql, (prefix.len(), prefix.as_bytes())).await
        })
        .await?;
    let prefix = &backend.inner.config.prefix;
    let listed = rows.into_iter().filter_map(|(key, token, waiting)| {
        let key = String::from_utf8(key).ok()?;
        let (space, name) = keys::parse(prefix, &key)?;
        Some(ListedLock {
            name,
            primitive: space.primitive(),
            holder_token: token.map(FencingToken),
            waiting: usize::try_from(waiting.unwrap_or(0)).unwrap_or(0),
        })
    });
    Ok(options.page(listed))
}

/// Deletes the holder of `name`'s lock, or of its election if the lock
/// has none, under the key's row lock (so it waits for a fenced
/// transaction of the holder to end).
pub(crate) async fn force_release(
    backend: &MysqlBackend,
    name: &LockName,
) -> Result<Option<HolderInfo>> {
    let sql = &backend.inner.sql;
    for space in [Space::Lock, Space::Election] {
        let key = backend.key(space, name);
        let evicted: Vec<ViewRow> = backend
            .inner
            .pool
            .run(&format!("break {key}"), |mut conn| {
                let key = key.clone();
                async move {
                    let mut tx = conn.start_transaction(crate::look::tx_opts()).await?;
                    let k = key.as_bytes();
                    tx.exec_drop(&sql.lock_key, (k,)).await?;
                    let rows: Vec<ViewRow> = tx.exec(&sql.entries_of, (k,)).await?;
                    let held: Vec<ViewRow> = rows.into_iter().filter(|row| row.1).collect();
                    if !held.is_empty() {
                        tx.exec_drop(&sql.delete_granted, (k,)).await?;
                    }
                    tx.commit().await?;
                    Ok(held)
                }
            })
            .await?;
        if let Some(row) = evicted.into_iter().next() {
            return Ok(Some(Entry::from_row(row).holder_info(space)));
        }
    }
    Ok(None)
}
