//! Waiters' turns: a first-come queue per lock, shared by every process.
//!
//! A release wakes the waiters of its own process at once, while waiters in
//! other processes notice only at their next poll; left alone, the
//! releasing process's waiters would nearly always win. So a waiter enrolls
//! in the lock's queue file, and a free lock goes only to the waiter at the
//! head (or to anyone when nobody waits). Entries carry a short lease the
//! waiter keeps renewing while it polls: a waiter that crashed, was
//! cancelled without cleaning up, or is stopped drops out after
//! [`ENTRY_LEASE`], and the next in line moves up.
//!
//! The queue is changed only under the lock's `flock`, rewritten in place
//! and never `fsync`ed: losing it in an OS crash only forgets whose turn it
//! was. Reads under the `flock` see it whole. A poll reads it without the
//! `flock` and may catch it half-written; that reads as an empty queue,
//! which only sends the poll on to a transaction under the `flock`.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::time::Duration;

use distlock_core::Access;
use serde::{Deserialize, Serialize};

use crate::clock::Now;
use crate::keys::LockPaths;
use crate::record::{Deadline, cut_to};
use crate::sharing::IN_PLACE_MODE;
use crate::stored_access::StoredAccess;

/// How long a waiter keeps its place without renewing it.
pub(crate) const ENTRY_LEASE: Duration = Duration::from_millis(400);
/// How often a waiter renews its place (its polls are at most 20 ms apart).
pub(crate) const ENTRY_RENEW: Duration = Duration::from_millis(100);

/// The waiters of one lock, first come first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Queue {
    waiters: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The waiter's holder id (the one it will hold the lock under).
    id: String,
    /// Until when the entry counts, as a lease deadline.
    #[serde(flatten)]
    lease: Deadline,
    /// Who waits, for operators (the description it will hold the lock with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// What it waits for, in the queues of semaphores and read-write locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    access: Option<StoredAccess>,
}

/// One waiter as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) id: String,
    pub(crate) description: Option<String>,
}

impl Queue {
    /// Reads the queue; a missing, half-written or unreadable one is empty
    /// (it only orders waiters, and every waiter re-enrolls within
    /// [`ENTRY_RENEW`]).
    pub(crate) fn read(paths: &LockPaths) -> io::Result<Queue> {
        match fs::read(&paths.queue) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Queue::default()),
            Err(e) => Err(e),
        }
    }

    /// Rewrites the queue in place (no new directory entries, so no extra
    /// journal work for other files' `fsync`s). Call only under the `flock`.
    pub(crate) fn write(&self, paths: &LockPaths) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&paths.queue)?;
        paths.sharing.open_to_all(&file, IN_PLACE_MODE)?;
        file.write_all(&bytes)?;
        // Some FAT drivers (fusefat) ignore `O_TRUNC`: a queue that shrank
        // would keep the old tail and read as empty, losing every turn.
        cut_to(&file, bytes.len())
    }

    /// Drops the entries whose lease ran out; returns whether any was.
    pub(crate) fn prune(&mut self, now: &Now) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|e| e.lease.is_ahead(now));
        self.waiters.len() != before
    }

    /// Whether `id` may take the free lock now: nobody waits, or it is first.
    pub(crate) fn turn_of(&self, id: &str) -> bool {
        self.waiters.first().is_none_or(|e| e.id == id)
    }

    /// What the waiters ahead of `id` wait for, first come first (all of
    /// them if `id` is not queued). A waiter enrolled without an access (a
    /// lock's) counts as a writer.
    pub(crate) fn ahead_of(&self, id: &str) -> Vec<Access> {
        let position = self.waiters.iter().position(|e| e.id == id);
        self.waiters[..position.unwrap_or(self.waiters.len())]
            .iter()
            .map(|e| e.access.map_or(Access::Write, |a| a.0))
            .collect()
    }

    /// Enrolls `id` at the back, waiting for `access` (`None` for a lock or
    /// an election), or renews its place if it has one.
    pub(crate) fn enroll(
        &mut self,
        id: &str,
        description: Option<&str>,
        access: Option<Access>,
        now: &Now,
    ) {
        let lease_ms = u64::try_from(ENTRY_LEASE.as_millis()).unwrap_or(u64::MAX);
        let lease = Deadline::after(now, lease_ms);
        match self.waiters.iter_mut().find(|e| e.id == id) {
            Some(entry) => entry.lease = lease,
            None => self.waiters.push(Entry {
                id: id.to_owned(),
                lease,
                description: description.map(str::to_owned),
                access: access.map(StoredAccess),
            }),
        }
    }

    /// The waiters, first come first.
    pub(crate) fn waiting(&self) -> Vec<Waiting> {
        self.waiters
            .iter()
            .map(|e| Waiting {
                id: e.id.clone(),
                description: e.description.clone(),
            })
            .collect()
    }

    /// Removes `id`; returns whether it was there.
    pub(crate) fn leave(&mut self, id: &str) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|e| e.id != id);
        self.waiters.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_at as at;

    #[test]
    fn first_come_first_served_and_lapsed_places_are_dropped() {
        let mut queue = Queue::default();
        assert!(queue.turn_of("anyone"));
        queue.enroll("a", None, None, &at(0));
        queue.enroll("b", None, None, &at(10));
        queue.enroll("a", None, None, &at(20));
        assert!(queue.turn_of("a") && !queue.turn_of("b"));
        // a stops renewing; b renews; a's place lapses.
        queue.enroll("b", None, None, &at(300));
        assert!(queue.prune(&at(420)));
        assert!(queue.turn_of("b"));
        assert!(queue.leave("b") && !queue.leave("b"));
        assert!(queue.turn_of("c"));
    }

    #[test]
    fn waiters_ahead_are_read_with_their_access() {
        let mut queue = Queue::default();
        queue.enroll("r", None, Some(Access::Read), &at(0));
        queue.enroll("w", None, Some(Access::Write), &at(0));
        queue.enroll("l", None, None, &at(0));
        assert_eq!(queue.ahead_of("r"), vec![]);
        assert_eq!(queue.ahead_of("l"), vec![Access::Read, Access::Write]);
        assert_eq!(queue.ahead_of("new").len(), 3);
    }
}
