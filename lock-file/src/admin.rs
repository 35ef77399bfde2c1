//! The operator's view of the lock directory: who holds a lock and who
//! waits ([`inspect`](distlock_core::LockBackend::inspect)), which locks exist
//! (`list`), and breaking a lock (`force_release`).
//!
//! Reads take no `flock`: records are replaced atomically, and a queue
//! caught half-written reads as empty (it shows no waiters for that one
//! read). A break is one transaction under the `flock`.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use distlock_core::WaiterInfo;
use distlock_core::{
    FencingToken, HolderInfo, ListOptions, ListPage, ListedLock, LockName, LockStatus, Result,
};

use crate::backend::FileBackend;
use crate::clock::{self, Now};
use crate::errors::{Unfinished, list_error, unfinished_at};
use crate::keys::{self, LockPaths, Space};
use crate::queue::Queue;
use crate::record::{self, Record};
use crate::shares::SharedRecord;
use crate::store;
use crate::wakeups;

/// One lock's record and live waiters, read without the `flock`.
fn read_status(paths: &LockPaths) -> io::Result<(Record, Queue, Now)> {
    let record = record::read(paths)?;
    let mut queue = Queue::read(paths)?;
    let now = clock::now();
    queue.prune(&now);
    Ok((record, queue, now))
}

/// What an operator sees of `record`'s holder, if its lease runs.
fn holder_info(paths: &LockPaths, record: &Record, now: &Now) -> Option<HolderInfo> {
    record.live_holder(now)?;
    Some(described(paths, record, now))
}

/// `record`'s holder as an operator sees it.
fn described(paths: &LockPaths, record: &Record, now: &Now) -> HolderInfo {
    HolderInfo {
        key: format!("{}#{}", paths.record.display(), record.token),
        token: FencingToken(record.token),
        // An election's leader is named by its value, as on every backend.
        description: match (paths.space, &record.value) {
            (Space::Election, Some(value)) => Some(String::from_utf8_lossy(value).into_owned()),
            _ => record.description.clone(),
        },
        acquired_at: record
            .acquired_ms
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        lease_left: Some(Duration::from_millis(record.remaining_ms(now))),
    }
}

fn status(
    name: &LockName,
    paths: &LockPaths,
    (record, queue, now): (Record, Queue, Now),
) -> LockStatus {
    let waiters: Vec<WaiterInfo> = queue
        .waiting()
        .into_iter()
        .map(|w| WaiterInfo {
            key: Some(format!("{}~{}", paths.queue.display(), w.id)),
            description: w.description,
        })
        .collect();
    LockStatus {
        name: name.clone(),
        primitive: paths.space.primitive(),
        holder: holder_info(paths, &record, &now),
        waiting: waiters.len(),
        waiters,
    }
}

/// The token of the holder in `paths`' space (the oldest live grant's, for
/// a semaphore or a read-write lock) and the number of live waiters, read
/// without the `flock`.
fn listing(paths: &LockPaths) -> io::Result<(Option<FencingToken>, usize)> {
    let mut queue = Queue::read(paths)?;
    let now = clock::now();
    queue.prune(&now);
    let holder = if paths.space.is_shared() {
        SharedRecord::read(paths)?
            .oldest_live(&now)
            .map(|share| FencingToken(share.token))
    } else {
        let record = record::read(paths)?;
        record.live_holder(&now).map(|_| FencingToken(record.token))
    };
    Ok((holder, queue.waiting().len()))
}

/// Every name with a record or queue under `root` (a space's directory).
fn names_under(root: &Path) -> io::Result<BTreeSet<LockName>> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                dirs.push(path);
            } else if let Some(name) = path.strip_prefix(root).ok().and_then(keys::name_of) {
                names.insert(name);
            }
        }
    }
    Ok(names)
}

impl FileBackend {
    /// The space `name` is operated on in, with its status: its lock,
    /// unless only its election is in use.
    pub(crate) async fn status_of(&self, name: &LockName) -> Result<(Space, LockStatus)> {
        let mut first = None;
        for space in keys::SINGLE_SPACES {
            let paths = self.paths(space, name);
            let p = paths.clone();
            let read = self
                .blocking("inspect", name, &paths.record, move |_| read_status(&p))
                .await?;
            let status = status(name, &paths, read);
            if status.is_held() || status.waiting > 0 {
                return Ok((space, status));
            }
            first.get_or_insert((space, status));
        }
        Ok(first.expect("there are two spaces"))
    }

    /// Every lock, election, semaphore and read-write lock held or waited
    /// for, on one page. The directory is walked and each record read,
    /// within the request timeout.
    pub(crate) async fn list_page(&self, options: &ListOptions) -> Result<ListPage> {
        let backend = self.clone();
        let dir = self.dir().to_owned();
        let prefix = options.prefix.clone();
        let walk = tokio::task::spawn_blocking(move || {
            let mut listed = Vec::new();
            for space in Space::ALL {
                for name in names_under(&dir.join(space.dir()))? {
                    if !name.as_str().starts_with(&prefix) {
                        continue;
                    }
                    let (holder, waiting) = listing(&backend.paths(space, &name))?;
                    if holder.is_some() || waiting > 0 {
                        listed.push(ListedLock {
                            name,
                            primitive: space.primitive(),
                            holder_token: holder,
                            waiting,
                        });
                    }
                }
            }
            Ok::<_, io::Error>(listed)
        });
        let limit = self.config().request_timeout;
        let dir = self.dir().display().to_string();
        let unfinished = |outcome| unfinished_at(&dir, "list the locks", outcome);
        match tokio::time::timeout(limit, walk).await {
            Ok(Ok(Ok(listed))) => Ok(options.page(listed)),
            Ok(Ok(Err(e))) => Err(list_error(e, &dir)),
            Ok(Err(join)) => Err(unfinished(Unfinished::Failed(&join))),
            Err(_) => Err(unfinished(Unfinished::TookLonger(limit))),
        }
    }

    /// Breaks `name`'s lock (or, if only its election is in use, the
    /// election's leadership): frees it and returns who held it.
    pub(crate) async fn break_lock(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        let (space, _) = self.status_of(name).await?;
        let paths = self.paths(space, name);
        let (p, fsync) = (paths.clone(), self.config().fsync);
        let evicted = self
            .blocking("force_release", name, &paths.record, move |bound| {
                store::force_release(&p, fsync, bound)
            })
            .await?;
        let Some(evicted) = evicted else {
            return Ok(None);
        };
        wakeups::notify(&paths.record);
        let now = clock::now();
        tracing::info!(backend = "file", lock = %name, token = evicted.token, "broken by force_release");
        Ok(Some(described(&paths, &evicted, &now)))
    }
}
