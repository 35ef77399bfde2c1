//! The shared lock table behind every clone of a `MemoryBackend`.
//!
//! One entry per (space, name): the holders with their leases and
//! descriptions (one for a lock or an election, up to the limit for a
//! semaphore, any number of readers for a read-write lock), a FIFO queue of
//! waiters, a change notification for waiters, and the published leader for
//! elections. Who is granted follows [`blockers`], over the holders and
//! then the waiters ahead. Expiry is lazy (checked on every access) plus timed wake-ups of
//! waiters at the holder's expiry instant.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::memory_error;
use crate::access::{Access, blockers, check_limit_agrees};
use crate::admin::{HolderInfo, ListedLock, LockStatus, WaiterInfo};
use crate::election::LeaderInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::lost::{LossNotifier, LostReason};
use crate::name::LockName;
use crate::options::Wait;
pub(super) use crate::space::Space;

/// What an acquisition was granted: its lease id and fencing token.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grant {
    pub(super) lease: u64,
    pub(super) token: u64,
    /// When the lease started: validity counts from here, not from when
    /// the caller started waiting.
    pub(super) granted_at: Instant,
}

/// The key that names one acquisition, shown to users as the guard's key.
pub(super) fn key_of(space: Space, name: &LockName, lease: u64) -> String {
    format!("memory:{}/{}#{}", space.as_str(), name, lease)
}

type EntryKey = (Space, LockName);

/// Waiter and lease ids, unique in the process (not just per table), so a
/// guard's key names one acquisition among all tables.
static LAST_ID: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
pub(super) struct Table {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<EntryKey, Entry>,
    last_token: u64,
}

#[derive(Debug)]
struct Entry {
    /// In grant order; a lock or an election has at most one.
    holders: Vec<Holder>,
    queue: VecDeque<Waiter>,
    changed: watch::Sender<()>,
    leader: watch::Sender<Option<LeaderInfo>>,
}

#[derive(Debug)]
struct Holder {
    lease: u64,
    access: Access,
    token: u64,
    expires_at: Instant,
    notifier: LossNotifier,
    value: Option<Vec<u8>>,
    description: String,
    acquired_at: SystemTime,
}

impl Holder {
    fn info(&self, space: Space, name: &LockName, now: Instant) -> HolderInfo {
        // An election's leader is named by its value, as on every backend.
        let description = match (space, &self.value) {
            (Space::Election, Some(value)) => String::from_utf8_lossy(value).into_owned(),
            _ => self.description.clone(),
        };
        HolderInfo {
            key: key_of(space, name, self.lease),
            token: FencingToken(self.token),
            description: Some(description),
            acquired_at: Some(self.acquired_at),
            lease_left: Some(self.expires_at.saturating_duration_since(now)),
        }
    }
}

/// A queued acquisition: its id and who it is for.
#[derive(Debug)]
struct Waiter {
    id: u64,
    access: Access,
    description: String,
}

/// What one acquisition asks for besides the name.
#[derive(Debug)]
pub(super) struct Request {
    /// [`Access::Write`] for locks and elections.
    pub(super) access: Access,
    pub(super) ttl: Duration,
    pub(super) wait: Wait,
    pub(super) notifier: LossNotifier,
    pub(super) value: Option<Vec<u8>>,
    pub(super) description: String,
}

impl Entry {
    fn new() -> Self {
        Entry {
            holders: Vec::new(),
            queue: VecDeque::new(),
            changed: watch::Sender::new(()),
            leader: watch::Sender::new(None),
        }
    }

    /// Drops the holders whose leases ran out, telling them and the waiters.
    fn expire_if_due(&mut self, now: Instant) {
        while let Some(at) = self.holders.iter().position(|h| h.expires_at <= now) {
            self.end_holder(at, LostReason::Expired);
        }
    }

    fn end_holder(&mut self, at: usize, reason: LostReason) -> Option<Holder> {
        if at >= self.holders.len() {
            return None;
        }
        let holder = self.holders.remove(at);
        holder.notifier.fire(reason);
        self.changed.send_replace(());
        Some(holder)
    }

    /// The first holder: the only one of a lock or an election.
    fn holder(&self) -> Option<&Holder> {
        self.holders.first()
    }

    /// The access of every entry ahead of the waiter at `position` in the
    /// queue (the end of the queue if it is not queued yet).
    fn ahead_of(&self, position: usize) -> Vec<Access> {
        let holders = self.holders.iter().map(|h| h.access);
        holders
            .chain(self.queue.iter().take(position).map(|w| w.access))
            .collect()
    }

    fn earliest_expiry(&self) -> Option<Instant> {
        self.holders.iter().map(|h| h.expires_at).min()
    }

    fn status(&self, space: Space, name: &LockName, now: Instant) -> LockStatus {
        LockStatus {
            name: name.clone(),
            primitive: space.primitive(),
            holder: self.holder().map(|h| h.info(space, name, now)),
            waiting: self.queue.len(),
            waiters: self
                .queue
                .iter()
                .map(|w| WaiterInfo {
                    key: Some(format!("memory:{}/{}~{}", space.as_str(), name, w.id)),
                    description: Some(w.description.clone()),
                })
                .collect(),
        }
    }

    fn holder_with(&mut self, lease: u64) -> Option<&mut Holder> {
        self.holders.iter_mut().find(|h| h.lease == lease)
    }

    fn is_idle(&self) -> bool {
        self.holders.is_empty()
            && self.queue.is_empty()
            && self.changed.receiver_count() == 0
            && self.leader.receiver_count() == 0
    }

    fn publish_leader(&self, key: &EntryKey) {
        if let Some(h) = self.holder()
            && let Some(value) = &h.value
        {
            self.leader.send_replace(Some(LeaderInfo {
                value: value.clone(),
                token: FencingToken(h.token),
                key: key_of(key.0, &key.1, h.lease),
            }));
        }
    }
}

/// Removes a waiter from its queue when its acquisition ends in any way,
/// including cancellation, and wakes the others so the next one can proceed.
struct QueueSlot<'a> {
    table: &'a Table,
    key: EntryKey,
    id: u64,
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        let mut state = self.table.lock();
        if let Some(entry) = state.entries.get_mut(&self.key)
            && let Some(pos) = entry.queue.iter().position(|w| w.id == self.id)
        {
            entry.queue.remove(pos);
            entry.changed.send_replace(());
        }
    }
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the lock (or a permit, or a side of a read-write lock),
    /// queueing in FIFO order until [`blockers`] lets it in.
    pub(super) async fn acquire(
        &self,
        space: Space,
        name: &LockName,
        request: Request,
    ) -> Result<Grant> {
        let Request {
            access,
            ttl,
            wait,
            notifier,
            value,
            description,
        } = request;
        let key = (space, name.clone());
        let deadline = wait.deadline_from(Instant::now());
        let id = LAST_ID.fetch_add(1, Ordering::Relaxed) + 1;
        let _slot = QueueSlot {
            table: self,
            key: key.clone(),
            id,
        };
        loop {
            let (mut changed, holder_expiry) = {
                let mut state = self.lock();
                let now = Instant::now();
                let next_token = state.last_token + 1;
                let entry = state.entries.entry(key.clone()).or_insert_with(Entry::new);
                entry.expire_if_due(now);
                let position = entry.queue.iter().position(|w| w.id == id);
                let ahead = entry.ahead_of(position.unwrap_or(entry.queue.len()));
                check_limit_agrees(name, access, &ahead)?;
                if blockers(access, &ahead).is_empty() {
                    entry.queue.retain(|w| w.id != id);
                    entry.holders.push(Holder {
                        lease: id,
                        access,
                        token: next_token,
                        expires_at: now + ttl,
                        notifier,
                        value,
                        description,
                        acquired_at: SystemTime::now(),
                    });
                    entry.publish_leader(&key);
                    state.last_token = next_token;
                    return Ok(Grant {
                        lease: id,
                        token: next_token,
                        granted_at: now,
                    });
                }
                if wait == Wait::No {
                    return Err(memory_error(
                        ErrorKind::WouldBlock,
                        format_args!("acquire {name}"),
                        busy(space, name, access),
                    ));
                }
                if position.is_none() {
                    entry.queue.push_back(Waiter {
                        id,
                        access,
                        description: description.clone(),
                    });
                }
                (entry.changed.subscribe(), entry.earliest_expiry())
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(memory_error(
                    ErrorKind::Timeout,
                    format_args!("acquire {name}"),
                    format_args!(
                        "{} after waiting {:?}",
                        busy(space, name, access),
                        match wait {
                            Wait::Timeout(d) => d,
                            _ => Duration::ZERO,
                        }
                    ),
                ));
            }
            let wake_at = match (holder_expiry, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = changed.changed() => {}
                        _ = sleep_until(at) => {}
                    }
                }
                None => {
                    let _ = changed.changed().await;
                }
            }
        }
    }

    /// Extends our lease by `ttl`, or reports it gone.
    pub(super) fn renew(
        &self,
        space: Space,
        name: &LockName,
        lease: u64,
        ttl: Duration,
    ) -> Result<()> {
        let mut state = self.lock();
        let now = Instant::now();
        let entry = state.entries.get_mut(&(space, name.clone()));
        match entry {
            Some(entry) => {
                entry.expire_if_due(now);
                match entry.holder_with(lease) {
                    Some(holder) => {
                        holder.expires_at = now + ttl;
                        Ok(())
                    }
                    None => Err(gone("renew", name)),
                }
            }
            None => Err(gone("renew", name)),
        }
    }

    /// Releases our lease if it is still the holder. Returns whether it was.
    pub(super) fn release(&self, space: Space, name: &LockName, lease: u64) -> bool {
        let mut state = self.lock();
        let key = (space, name.clone());
        let Some(entry) = state.entries.get_mut(&key) else {
            return false;
        };
        entry.expire_if_due(Instant::now());
        let at = entry.holders.iter().position(|h| h.lease == lease);
        let ours = at.and_then(|at| entry.end_holder(at, LostReason::Released));
        let ours = ours.is_some();
        if entry.is_idle() {
            state.entries.remove(&key);
        }
        ours
    }

    /// Ends whatever lease holds `name`, as a server-side expiry would.
    #[cfg(feature = "testing")]
    pub(super) fn expire_holder(&self, space: Space, name: &LockName) -> bool {
        let mut state = self.lock();
        match state.entries.get_mut(&(space, name.clone())) {
            Some(entry) => entry.end_holder(0, LostReason::Expired).is_some(),
            None => false,
        }
    }

    /// The holder and waiters of `name` now.
    pub(super) fn inspect(&self, space: Space, name: &LockName) -> LockStatus {
        let mut state = self.lock();
        let now = Instant::now();
        match state.entries.get_mut(&(space, name.clone())) {
            Some(entry) => {
                entry.expire_if_due(now);
                entry.status(space, name, now)
            }
            None => LockStatus::free(name.clone()),
        }
    }

    /// Every name that is held or waited for.
    pub(super) fn list(&self) -> Vec<ListedLock> {
        let mut state = self.lock();
        let now = Instant::now();
        state
            .entries
            .iter_mut()
            .filter_map(|((space, name), entry)| {
                entry.expire_if_due(now);
                (!entry.holders.is_empty() || !entry.queue.is_empty()).then(|| ListedLock {
                    name: name.clone(),
                    primitive: space.primitive(),
                    holder_token: entry.holder().map(|h| FencingToken(h.token)),
                    waiting: entry.queue.len(),
                })
            })
            .collect()
    }

    /// Evicts whoever holds `name`, firing its lost signal with
    /// [`LostReason::Revoked`], and returns what it was. The token counter is
    /// untouched, so the next grant's token is higher; waiters stay queued.
    pub(super) fn force_release(&self, space: Space, name: &LockName) -> Option<HolderInfo> {
        let mut state = self.lock();
        let now = Instant::now();
        let entry = state.entries.get_mut(&(space, name.clone()))?;
        entry.expire_if_due(now);
        let info = entry.holder()?.info(space, name, now);
        entry.end_holder(0, LostReason::Revoked);
        Some(info)
    }

    /// Ends the lease whose guard key is `key`, if it still holds its lock.
    #[cfg(feature = "testing")]
    pub(super) fn expire_key(&self, key: &str) -> bool {
        let mut state = self.lock();
        for ((space, name), entry) in state.entries.iter_mut() {
            if let Some(at) =
                (entry.holders.iter()).position(|h| key_of(*space, name, h.lease) == key)
            {
                entry.end_holder(at, LostReason::Expired);
                return true;
            }
        }
        false
    }

    /// Publishes a new leader value if `lease` still leads `name`.
    pub(super) fn proclaim(&self, name: &LockName, lease: u64, value: Vec<u8>) -> Result<()> {
        let mut state = self.lock();
        let key = (Space::Election, name.clone());
        let entry = state
            .entries
            .get_mut(&key)
            .ok_or_else(|| gone("proclaim", name))?;
        entry.expire_if_due(Instant::now());
        let holder = entry
            .holder_with(lease)
            .ok_or_else(|| gone("proclaim", name))?;
        holder.value = Some(value);
        entry.publish_leader(&key);
        Ok(())
    }

    /// The current leader of an election.
    pub(super) fn leader(&self, name: &LockName) -> Option<LeaderInfo> {
        let mut state = self.lock();
        let entry = state.entries.get_mut(&(Space::Election, name.clone()))?;
        entry.expire_if_due(Instant::now());
        let holder = entry.holder()?;
        Some(LeaderInfo {
            value: holder.value.clone().unwrap_or_default(),
            token: FencingToken(holder.token),
            key: key_of(Space::Election, name, holder.lease),
        })
    }

    /// Subscribes to the leaders published for an election.
    pub(super) fn watch_leader(&self, name: &LockName) -> watch::Receiver<Option<LeaderInfo>> {
        let mut state = self.lock();
        let entry = state
            .entries
            .entry((Space::Election, name.clone()))
            .or_insert_with(Entry::new);
        entry.expire_if_due(Instant::now());
        entry.leader.subscribe()
    }
}

/// Why an acquisition cannot be granted now.
fn busy(space: Space, name: &LockName, access: Access) -> String {
    match space {
        Space::Lock | Space::Election => format!("lock {name} is held by another client"),
        Space::Semaphore => format!(
            "{} is not free: every permit is held or queued for",
            access.describe(name)
        ),
        Space::RwLock => format!(
            "{} is not free: the lock is held or queued for",
            access.describe(name)
        ),
    }
}

/// `LeaseLost` for `op` on `name`, whose lease is gone.
fn gone(op: &str, name: &LockName) -> Error {
    memory_error(
        ErrorKind::LeaseLost,
        format_args!("{op} {name}"),
        "the lease has expired or was revoked",
    )
}
