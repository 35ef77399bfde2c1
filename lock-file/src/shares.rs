//! The record of a semaphore or a read-write lock: every grant it holds,
//! and the one fencing counter they all take their tokens from.
//!
//! It is read and replaced like a lock's record ([`crate::record`]):
//! atomically, under the name's `flock`. Who may be granted follows
//! [`blockers`] over the live grants (in grant order) and then the waiters
//! queued ahead ([`crate::queue`]), so one rule gives a semaphore its limit
//! and a read-write lock its writer preference: a reader queued behind a
//! waiting writer waits for it.

use distlock_core::Access;
use distlock_core::Permits;
use distlock_core::raw::blockers;
use serde::{Deserialize, Serialize};

use std::io;

use crate::clock::Now;
use crate::keys::LockPaths;
use crate::queue::Queue;
use crate::record::{self, Deadline};
use crate::store::Attempt;
use crate::stored_access::StoredAccess;

/// One semaphore's or read-write lock's state. An absent file is the
/// default: no grants, counter at 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SharedRecord {
    /// The last fencing token issued for this name, whatever the access.
    pub(crate) token: u64,
    /// The grants, oldest first. One whose lease ran out counts for
    /// nothing, and is dropped at the next grant.
    #[serde(default)]
    pub(crate) holders: Vec<Share>,
}

/// One grant: whose it is, what it holds, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Share {
    /// The random id of the acquisition.
    pub(crate) id: String,
    pub(crate) access: StoredAccess,
    pub(crate) token: u64,
    #[serde(flatten)]
    pub(crate) lease: Deadline,
    /// Who holds it, for operators: the holder's label, by default `host:pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// When it was granted, in wall-clock milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) acquired_ms: Option<u64>,
}

/// What a grant stores besides its id.
#[derive(Debug, Clone)]
pub(crate) struct ShareClaim {
    pub(crate) access: Access,
    pub(crate) ttl_ms: u64,
    pub(crate) description: Option<String>,
}

impl SharedRecord {
    /// Reads the record; a missing file is a fresh record. One that does
    /// not parse is an error, never reset (that would restart the tokens).
    pub(crate) fn read(paths: &LockPaths) -> io::Result<SharedRecord> {
        Ok(record::read_file(&paths.record)?.unwrap_or_default())
    }

    /// The grants whose leases still run at `now`, oldest first.
    fn live(&self, now: &Now) -> impl Iterator<Item = &Share> + use<'_> {
        let now = *now;
        self.holders.iter().filter(move |s| s.lease.is_ahead(&now))
    }

    /// The oldest grant whose lease still runs at `now`.
    pub(crate) fn oldest_live(&self, now: &Now) -> Option<&Share> {
        self.live(now).next()
    }

    /// `id`'s grant, if its lease still runs at `now`.
    pub(crate) fn live_share(&self, id: &str, now: &Now) -> Option<&Share> {
        self.live(now).find(|s| s.id == id)
    }

    /// Whether `id` may be granted `access` at `now`, behind the live
    /// grants and the waiters queued ahead of it; `Err` with what the
    /// attempt found if not.
    pub(crate) fn verdict(
        &self,
        id: &str,
        access: Access,
        queue: &Queue,
        now: &Now,
    ) -> Result<(), Attempt> {
        let live: Vec<&Share> = self.live(now).collect();
        let mut ahead: Vec<Access> = live.iter().map(|s| s.access.0).collect();
        ahead.extend(queue.ahead_of(id));
        if let Some(theirs) = disagreeing_limit(access, &ahead) {
            return Err(Attempt::Refused { theirs });
        }
        let blocking = blockers(access, &ahead);
        if blocking.is_empty() {
            return Ok(());
        }
        let held: Vec<u64> = blocking
            .iter()
            .filter_map(|&at| live.get(at))
            .map(|s| s.lease.remaining_ms(now))
            .collect();
        match held.iter().min() {
            // Only holders block it: it is next when one of them goes.
            Some(&ms) => Err(Attempt::Held {
                remaining_ms: ms.max(1),
                next: held.len() == blocking.len(),
            }),
            None => Err(Attempt::Queued),
        }
    }

    /// Grants `claim` to `id` at `now` with the next token, dropping the
    /// grants whose leases ran out. Returns the token.
    pub(crate) fn grant(&mut self, id: &str, claim: ShareClaim, now: &Now) -> u64 {
        self.holders.retain(|s| s.lease.is_ahead(now));
        self.token += 1;
        self.holders.push(Share {
            id: id.to_owned(),
            access: StoredAccess(claim.access),
            token: self.token,
            lease: Deadline::after(now, claim.ttl_ms),
            description: claim.description,
            acquired_ms: Some(now.wall_ms),
        });
        self.token
    }

    /// Pushes `id`'s lease to `ttl_ms` after `now`. Call only while it runs.
    pub(crate) fn renew(&mut self, id: &str, now: &Now, ttl_ms: u64) {
        if let Some(share) = self.holders.iter_mut().find(|s| s.id == id) {
            share.lease = Deadline::after(now, ttl_ms);
        }
    }

    /// Drops `id`'s grant.
    pub(crate) fn remove(&mut self, id: &str) {
        self.holders.retain(|s| s.id != id);
    }
}

/// The limit of a permit ahead that differs from `access`'s, if any: what
/// [`check_limit_agrees`](distlock_core::raw::check_limit_agrees) refuses.
fn disagreeing_limit(access: Access, ahead: &[Access]) -> Option<Permits> {
    let Access::Permit(mine) = access else {
        return None;
    };
    ahead.iter().find_map(|a| match a {
        Access::Permit(theirs) if *theirs != mine => Some(*theirs),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_at as at;

    fn claim(access: Access) -> ShareClaim {
        ShareClaim {
            access,
            ttl_ms: 100,
            description: None,
        }
    }

    fn permit(n: u32) -> Access {
        Access::permit(n).unwrap()
    }

    #[test]
    fn permits_are_granted_up_to_the_limit_and_expired_ones_free_their_place() {
        let (mut record, queue) = (SharedRecord::default(), Queue::default());
        for (id, token) in [("a", 1), ("b", 2)] {
            assert_eq!(record.verdict(id, permit(2), &queue, &at(0)), Ok(()));
            assert_eq!(record.grant(id, claim(permit(2)), &at(0)), token);
        }
        assert_eq!(
            record.verdict("c", permit(2), &queue, &at(10)),
            Err(Attempt::Held {
                remaining_ms: 90,
                next: true
            })
        );
        assert_eq!(
            record.verdict("c", permit(3), &queue, &at(10)),
            Err(Attempt::Refused {
                theirs: Permits::new(2).unwrap()
            })
        );
        assert_eq!(record.verdict("c", permit(2), &queue, &at(100)), Ok(()));
        assert_eq!(record.grant("c", claim(permit(2)), &at(100)), 3);
        assert_eq!(record.holders.len(), 1, "the run-out grants are dropped");
    }

    #[test]
    fn readers_share_and_a_queued_writer_goes_before_later_readers() {
        let (mut record, mut queue) = (SharedRecord::default(), Queue::default());
        record.grant("r1", claim(Access::Read), &at(0));
        assert_eq!(record.verdict("r2", Access::Read, &queue, &at(0)), Ok(()));
        queue.enroll("w", None, Some(Access::Write), &at(0));
        assert!(matches!(
            record.verdict("w", Access::Write, &queue, &at(0)),
            Err(Attempt::Held { next: true, .. })
        ));
        assert_eq!(
            record.verdict("r2", Access::Read, &queue, &at(0)),
            Err(Attempt::Queued),
            "a reader arriving after a waiting writer waits for it"
        );
        record.remove("r1");
        assert_eq!(record.verdict("w", Access::Write, &queue, &at(0)), Ok(()));
        record.grant("w", claim(Access::Write), &at(0));
        queue.leave("w");
        assert!(matches!(
            record.verdict("r2", Access::Read, &queue, &at(0)),
            Err(Attempt::Held { .. })
        ));
    }
}
