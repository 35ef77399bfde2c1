//! The operator's view: inspect, list and force_release, from the rows of
//! `entries` whose lease has not run out.

use std::time::{Duration, UNIX_EPOCH};

use distlock_core::WaiterInfo;
use distlock_core::{
    FencingToken, HolderInfo, ListOptions, ListPage, ListedLock, LockName, LockStatus, Result,
};
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::backend::PostgresBackend;
use crate::keys::{self, Space};

/// One entry as an operator sees it.
struct Entry {
    key: String,
    granted: bool,
    token: Option<i64>,
    holder: Option<String>,
    value: Option<Vec<u8>>,
    granted_at: Option<f64>,
    lease_left_ms: Option<f64>,
}

impl Entry {
    fn from_row(row: &Row) -> Self {
        Entry {
            key: row.get(0),
            granted: row.get(1),
            token: row.get(2),
            holder: row.get(3),
            value: row.get(4),
            granted_at: row.get(5),
            lease_left_ms: row.get(6),
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
            token: FencingToken(self.token.and_then(|t| u64::try_from(t).ok()).unwrap_or(0)),
            description,
            acquired_at: self
                .granted_at
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| UNIX_EPOCH + Duration::from_secs_f64(s)),
            lease_left: self
                .lease_left_ms
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
        }
    }
}

async fn entries(backend: &PostgresBackend, key: &str) -> Result<Vec<Entry>> {
    let sql = &backend.inner.sql.entries_of;
    let rows = backend
        .inner
        .pool
        .run(&format!("inspect {key}"), |client| async move {
            client.query_typed(sql, &[(&key, Type::TEXT)]).await
        })
        .await?;
    Ok(rows.iter().map(Entry::from_row).collect())
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
pub(crate) async fn inspect(backend: &PostgresBackend, name: &LockName) -> Result<LockStatus> {
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
pub(crate) async fn list(backend: &PostgresBackend, options: &ListOptions) -> Result<ListPage> {
    let prefix = backend.inner.config.prefix.clone();
    let sql = &backend.inner.sql.keys_under;
    let rows = backend
        .inner
        .pool
        .run("list the locks", |client| {
            let prefix = prefix.clone();
            async move { client.query_typed(sql, &[(&prefix, Type::TEXT)]).await }
        })
        .await?;
    let listed = rows.iter().filter_map(|row| {
        let key: String = row.get(0);
        let token: Option<i64> = row.get(1);
        let waiting: i64 = row.get(2);
        let (space, name) = keys::parse(&prefix, &key)?;
        Some(ListedLock {
            name,
            primitive: space.primitive(),
            holder_token: token.and_then(|t| u64::try_from(t).ok()).map(FencingToken),
            waiting: usize::try_from(waiting).unwrap_or(0),
        })
    });
    Ok(options.page(listed))
}

/// Deletes the holder of `name`'s lock, or of its election if the lock
/// has none.
pub(crate) async fn force_release(
    backend: &PostgresBackend,
    name: &LockName,
) -> Result<Option<HolderInfo>> {
    for space in [Space::Lock, Space::Election] {
        let key = backend.key(space, name);
        let sql = &backend.inner.sql.force_release;
        let rows = backend
            .inner
            .pool
            .run(&format!("break {key}"), |client| {
                let key = key.clone();
                async move { client.query_typed(sql, &[(&key, Type::TEXT)]).await }
            })
            .await?;
        if let Some(row) = rows.first() {
            return Ok(Some(Entry::from_row(row).holder_info(space)));
        }
    }
    Ok(None)
}
