//! The read-modify-write transactions on a lock record, each under `flock`.
//!
//! Every function here is blocking and short: open the lock file, take an
//! exclusive `flock` on it, read the record, decide, replace the record if
//! it changed, unlock. The `flock` is held only for that, never while a lock
//! is held, so a holder that dies leaves no OS lock behind: only a record
//! whose lease deadline runs out. The `flock` is waited for only within the
//! caller's [`Bound`], and a poll of a lock that is held takes no `flock`.

use std::fs::{File, OpenOptions};
use std::io;

use distlock_core::Access;
use distlock_core::Permits;
use serde::Serialize;

use crate::clock::{self, Now};
use crate::flock::{self, Bound};
use crate::keys::LockPaths;
use crate::queue::Queue;
use crate::record::{self, Durability, Record};
use crate::shares::{ShareClaim, SharedRecord};
use crate::sharing::IN_PLACE_MODE;

/// What an acquisition attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours, with this fencing token.
    Granted { token: u64 },
    /// Someone else's lease runs for this many more milliseconds; `next`
    /// if only holders stand before the caller (it is first among the
    /// waiters, or nobody waits).
    Held { remaining_ms: u64, next: bool },
    /// The lock is free, but it is an earlier waiter's turn.
    Queued,
    /// A permit ahead is of a semaphore with this other limit.
    Refused { theirs: Permits },
}

/// Why an operation on a held lock did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Our lease ran out (or was ended from outside) and nobody took over yet.
    Expired,
    /// Someone else holds, or held, the lock since.
    TakenOver,
    /// The lock was released.
    Released,
    /// An operator broke the lock (`force_release`).
    Revoked,
}

/// What the transactions here need of a record, of either kind: a lock's
/// or an election's ([`Record`], one holder) or a semaphore's or a
/// read-write lock's ([`SharedRecord`], many).
trait Holdings: Serialize + Sized {
    fn read(paths: &LockPaths) -> io::Result<Self>;
    /// Whether `holder` holds a running lease at `now`.
    fn holds(&self, holder: &str, now: &Now) -> bool;
    /// Why `holder`, which does not hold a running lease, has none.
    fn gone(&self, holder: &str, now: &Now) -> Gone;
}

impl Holdings for Record {
    fn read(paths: &LockPaths) -> io::Result<Self> {
        record::read(paths)
    }

    fn holds(&self, holder: &str, now: &Now) -> bool {
        self.is_held_by(holder, now)
    }

    fn gone(&self, holder: &str, now: &Now) -> Gone {
        if self.was_revoked(holder, now) {
            return Gone::Revoked;
        }
        match self.holder.as_deref() {
            Some(h) if h == holder => Gone::Expired,
            Some(_) => Gone::TakenOver,
            None => Gone::Released,
        }
    }
}

impl Holdings for SharedRecord {
    fn read(paths: &LockPaths) -> io::Result<Self> {
        SharedRecord::read(paths)
    }

    fn holds(&self, holder: &str, now: &Now) -> bool {
        self.live_share(holder, now).is_some()
    }

    /// A grant that ran out stays in the record until the next grant drops
    /// it; either way its lease ended, which is what it learns.
    fn gone(&self, _holder: &str, _now: &Now) -> Gone {
        Gone::Expired
    }
}

fn open_lock_file(paths: &LockPaths) -> io::Result<File> {
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&paths.lock)
    };
    let file = match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            paths.sharing.create_dirs(paths.dir())?;
            open()
        }
        other => other,
    }?;
    paths.sharing.open_to_all(&file, IN_PLACE_MODE)?;
    Ok(file)
}

/// Runs `decide` on the record under the `flock`, writing the record back
/// if it returns `true` as its second value.
fn transact<R: Holdings, T>(
    paths: &LockPaths,
    durability: impl Into<Durability>,
    bound: &Bound,
    decide: impl FnOnce(&mut R, &Now) -> (T, bool),
) -> io::Result<T> {
    let durability = durability.into();
    locked(paths, bound, || {
        let mut record = R::read(paths)?;
        let (out, changed) = decide(&mut record, &clock::now());
        if changed {
            record::write(paths, &record, durability)?;
        }
        Ok(out)
    })
}

/// Runs `f` under the lock's `flock`.
fn locked<T>(paths: &LockPaths, bound: &Bound, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let file = open_lock_file(paths)?;
    flock::lock(&file, &paths.lock, bound)?;
    let out = f();
    drop(file);
    out
}

fn held(record: &Record, now: &Now, next: bool) -> Option<Attempt> {
    record.live_holder(now).map(|_| Attempt::Held {
        remaining_ms: record.remaining_ms(now).max(1),
        next,
    })
}

/// What a grant stores besides the holder id: the election value and the
/// holder's description; for a semaphore or a read-write lock, the access
/// asked for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Claim {
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) description: Option<String>,
    pub(crate) access: Option<Access>,
}

/// Takes the lock for `holder` if it is free or its lease ran out, and it
/// is `holder`'s turn in the waiters' [`Queue`] (nobody waits, or `holder`
/// is first); a granted waiter leaves the queue. In the shared spaces, the
/// permit or side of a read-write lock in `claim.access`, if the grants and
/// the waiters ahead let it in ([`SharedRecord::verdict`]).
///
/// A lock that is held, or free but not `holder`'s turn, is seen from plain
/// reads (records and queues are replaced atomically), so a waiter's poll
/// takes no `flock`: a waiter stopped mid-poll blocks no one.
pub(crate) fn try_acquire(
    paths: &LockPaths,
    holder: &str,
    ttl_ms: u64,
    claim: Claim,
    fsync: bool,
    bound: &Bound,
) -> io::Result<Attempt> {
    let Claim {
        value,
        description,
        access,
    } = claim;
    let Some(access) = access else {
        let verdict = |record: &Record, queue: &Queue, now: &Now| {
            let next = queue.turn_of(holder);
            match held(record, now, next) {
                Some(held) => Err(held),
                None if !next => Err(Attempt::Queued),
                None => Ok(()),
            }
        };
        return claim_turn(paths, holder, fsync, bound, verdict, |record, now| {
            let token = record.token + 1;
            *record = Record {
                holder: Some(holder.to_owned()),
                token,
                value,
                description,
                acquired_ms: Some(now.wall_ms),
                revoked: record.live_revocations(now),
                ..Record::default()
            };
            record.set_deadline(now, ttl_ms);
            token
        });
    };
    let verdict = |record: &SharedRecord, queue: &Queue, now: &Now| {
        record.verdict(holder, access, queue, now)
    };
    let claim = ShareClaim {
        access,
        ttl_ms,
        description,
    };
    claim_turn(paths, holder, fsync, bound, verdict, |record, now| {
        record.grant(holder, claim, now)
    })
}

/// Grants `holder` the record if `verdict` lets it in, first from plain
/// reads, then again under the `flock`: `grant` changes the record and
/// returns the token, and the winner leaves the queue.
fn claim_turn<R: Holdings>(
    paths: &LockPaths,
    holder: &str,
    fsync: bool,
    bound: &Bound,
    verdict: impl Fn(&R, &Queue, &Now) -> Result<(), Attempt>,
    grant: impl FnOnce(&mut R, &Now) -> u64,
) -> io::Result<Attempt> {
    // Without the `flock`: a held lock, or one that is an earlier waiter's
    // turn, needs no transaction (and leaves the `flock` to that waiter).
    let record = R::read(paths)?;
    let mut queue = Queue::read(paths)?;
    let now = clock::now();
    queue.prune(&now);
    if let Err(attempt) = verdict(&record, &queue, &now) {
        return Ok(attempt);
    }
    locked(paths, bound, || {
        let mut record = R::read(paths)?;
        let now = clock::now();
        let mut queue = Queue::read(paths)?;
        let pruned = queue.prune(&now);
        if let Err(attempt) = verdict(&record, &queue, &now) {
            if pruned {
                queue.write(paths)?;
            }
            return Ok(attempt);
        }
        let token = grant(&mut record, &now);
        record::write(paths, &record, fsync.into())?;
        if queue.leave(holder) || pruned {
            queue.write(paths)?;
        }
        Ok(Attempt::Granted { token })
    })
}

/// Enrolls `holder` (described as `description`, waiting for `access` in
/// the shared spaces) as a waiter on the lock, or renews its place.
pub(crate) fn enroll(
    paths: &LockPaths,
    holder: &str,
    description: Option<&str>,
    access: Option<Access>,
    bound: &Bound,
) -> io::Result<()> {
    locked(paths, bound, || {
        let now = clock::now();
        let mut queue = Queue::read(paths)?;
        queue.prune(&now);
        queue.enroll(holder, description, access, &now);
        queue.write(paths)
    })
}

/// Gives up `holder`'s place among the waiters, if it has one.
pub(crate) fn leave(paths: &LockPaths, holder: &str, bound: &Bound) -> io::Result<()> {
    locked(paths, bound, || {
        let mut queue = Queue::read(paths)?;
        if queue.leave(holder) {
            queue.write(paths)?;
        }
        Ok(())
    })
}

/// Changes the record with `change` if `holder`'s lease is still running;
/// otherwise touches nothing and says who has it now.
fn while_held<R: Holdings>(
    paths: &LockPaths,
    holder: &str,
    durability: Durability,
    bound: &Bound,
    change: impl FnOnce(&mut R, &Now),
) -> io::Result<Result<(), Gone>> {
    transact(paths, durability, bound, |record: &mut R, now| {
        if record.holds(holder, now) {
            change(record, now);
            (Ok(()), true)
        } else {
            (Err(record.gone(holder, now)), false)
        }
    })
}

/// What a holder does to its own running lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Update {
    /// Extends the lease (its grant's, in the shared spaces) to now + `ttl_ms`.
    Renew { ttl_ms: u64 },
    /// Frees the lock (drops the holder's grant, in the shared spaces).
    Release,
}

/// Applies `update` to `holder`'s lease if it is still running; otherwise
/// touches nothing and says who has it now. A lease that already ran out is
/// never revived: the lock may have looked free to someone in the meantime.
pub(crate) fn update(
    paths: &LockPaths,
    holder: &str,
    update: Update,
    durability: impl Into<Durability>,
    bound: &Bound,
) -> io::Result<Result<(), Gone>> {
    let durability = durability.into();
    if paths.space.is_shared() {
        let change = |grants: &mut SharedRecord, now: &Now| match update {
            Update::Renew { ttl_ms } => grants.renew(holder, now, ttl_ms),
            Update::Release => grants.remove(holder),
        };
        while_held(paths, holder, durability, bound, change)
    } else {
        let change = |record: &mut Record, now: &Now| match update {
            Update::Renew { ttl_ms } => record.set_deadline(now, ttl_ms),
            Update::Release => record.free(),
        };
        while_held(paths, holder, durability, bound, change)
    }
}

/// Evicts whoever holds the lock now (an operator breaking it): frees it,
/// keeps the fencing counter, and remembers the evicted holder so that its
/// next renewal learns it was revoked. Returns the evicted record.
pub(crate) fn force_release(
    paths: &LockPaths,
    fsync: bool,
    bound: &Bound,
) -> io::Result<Option<Record>> {
    if !paths.lock.exists() {
        return Ok(None);
    }
    transact(paths, fsync, bound, |record: &mut Record, now| {
        let evicted = record.revoke(now);
        let changed = evicted.is_some();
        (evicted, changed)
    })
}

/// Replaces the election value if `holder` still leads.
pub(crate) fn proclaim(
    paths: &LockPaths,
    holder: &str,
    value: Vec<u8>,
    fsync: bool,
    bound: &Bound,
) -> io::Result<Result<(), Gone>> {
    while_held(
        paths,
        holder,
        fsync.into(),
        bound,
        |record: &mut Record, _| {
            record.value = Some(value);
        },
    )
}

/// Ends whatever lease holds the lock now, as if its TTL had run out.
/// Returns whether there was a running lease.
#[cfg(feature = "testing")]
pub(crate) fn expire(paths: &LockPaths, fsync: bool, bound: &Bound) -> io::Result<bool> {
    if !paths.lock.exists() {
        return Ok(false);
    }
    transact(paths, fsync, bound, |record: &mut Record, now| {
        if record.live_holder(now).is_some() {
            record.end_lease();
            (true, true)
        } else {
            (false, false)
        }
    })
}

/// The record as it is now, read without the `flock` (replacement is atomic).
pub(crate) fn read(paths: &LockPaths) -> io::Result<Record> {
    record::read(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Case;
    use crate::keys::Space;
    use distlock_core::LockName;

    fn b() -> Bound {
        Bound::within(std::time::Duration::from_secs(5))
    }

    fn paths(dir: &tempfile::TempDir) -> LockPaths {
        LockPaths::new(
            dir.path(),
            Space::Lock,
            &LockName::new("a/b").unwrap(),
            Case::Sensitive,
        )
    }

    #[test]
    fn escaping_upper_case_keeps_the_fencing_counter_going() {
        let dir = tempfile::tempdir().unwrap();
        let name = LockName::new("Job").unwrap();
        let before = LockPaths::new(dir.path(), Space::Lock, &name, Case::Sensitive);
        let mut last = 0;
        for holder in ["x", "y"] {
            let Attempt::Granted { token } =
                try_acquire(&before, holder, 60_000, Claim::default(), false, &b()).unwrap()
            else {
                panic!("free lock not granted");
            };
            update(&before, holder, Update::Release, false, &b())
                .unwrap()
                .unwrap();
            last = token;
        }
        let after = LockPaths::new(dir.path(), Space::Lock, &name, Case::Insensitive);
        assert_ne!(after.record, before.record);
        assert_eq!(
            try_acquire(&after, "z", 60_000, Claim::default(), false, &b()).unwrap(),
            Attempt::Granted { token: last + 1 }
        );
    }

    #[test]
    fn counter_survives_release_expiry_and_takeover() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(&dir);
        assert_eq!(
            try_acquire(&p, "x", 60_000, Claim::default(), false, &b()).unwrap(),
            Attempt::Granted { token: 1 }
        );
        assert!(matches!(
            try_acquire(&p, "y", 60_000, Claim::default(), false, &b()).unwrap(),
            Attempt::Held { .. }
        ));
        assert_eq!(
            update(&p, "x", Update::Release, false, &b()).unwrap(),
            Ok(())
        );
        assert_eq!(
            try_acquire(&p, "y", 60_000, Claim::default(), false, &b()).unwrap(),
            Attempt::Granted { token: 2 }
        );
        assert!(expire(&p, false, &b()).unwrap());
        assert_eq!(
            update(&p, "y", Update::Renew { ttl_ms: 60_000 }, false, &b()).unwrap(),
            Err(Gone::Expired)
        );
        assert_eq!(
            try_acquire(&p, "z", 60_000, Claim::default(), false, &b()).unwrap(),
            Attempt::Granted { token: 3 }
        );
        assert_eq!(
            update(&p, "y", Update::Release, false, &b()).unwrap(),
            Err(Gone::TakenOver)
        );
        assert_eq!(read(&p).unwrap().holder.as_deref(), Some("z"));
    }

    #[test]
    fn a_broken_lock_keeps_its_counter_and_its_evicted_holder_learns_it_was_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(&dir);
        assert_eq!(force_release(&p, false, &b()).unwrap(), None);
        let claim = Claim {
            value: None,
            description: Some("stuck".into()),
            access: None,
        };
        assert_eq!(
            try_acquire(&p, "x", 60_000, claim, false, &b()).unwrap(),
            Attempt::Granted { token: 1 }
        );
        let evicted = force_release(&p, false, &b()).unwrap().expect("a holder");
        assert_eq!(
            (evicted.token, evicted.description.as_deref()),
            (1, Some("stuck"))
        );
        assert_eq!(
            force_release(&p, false, &b()).unwrap(),
            None,
            "already free"
        );
        // Someone takes over before the evicted holder renews: it still
        // learns that it was revoked, and cannot touch the new holder.
        assert_eq!(
            try_acquire(&p, "y", 60_000, Claim::default(), false, &b()).unwrap(),
            Attempt::Granted { token: 2 }
        );
        assert_eq!(
            update(&p, "x", Update::Renew { ttl_ms: 60_000 }, false, &b()).unwrap(),
            Err(Gone::Revoked)
        );
        assert_eq!(
            update(&p, "x", Update::Release, false, &b()).unwrap(),
            Err(Gone::Revoked)
        );
        assert!(read(&p).unwrap().is_held_by("y", &clock::now()));
    }

    #[test]
    fn shared_grants_renew_and_release_only_their_own_lease() {
        let dir = tempfile::tempdir().unwrap();
        let name = LockName::new("pool").unwrap();
        let p = LockPaths::new(dir.path(), Space::Semaphore, &name, Case::Sensitive);
        let permit = |ttl_ms, holder| {
            let claim = Claim {
                access: Some(Access::permit(2).unwrap()),
                ..Claim::default()
            };
            try_acquire(&p, holder, ttl_ms, claim, false, &b()).unwrap()
        };
        assert_eq!(permit(60_000, "x"), Attempt::Granted { token: 1 });
        assert_eq!(permit(1, "y"), Attempt::Granted { token: 2 });
        std::thread::sleep(std::time::Duration::from_millis(5));
        // y's lease ran out: it is never revived, and frees its permit.
        assert_eq!(
            update(&p, "y", Update::Renew { ttl_ms: 60_000 }, false, &b()).unwrap(),
            Err(Gone::Expired)
        );
        assert_eq!(
            update(&p, "y", Update::Release, false, &b()).unwrap(),
            Err(Gone::Expired)
        );
        assert_eq!(
            update(&p, "z", Update::Release, false, &b()).unwrap(),
            Err(Gone::Expired)
        );
        assert_eq!(permit(60_000, "z"), Attempt::Granted { token: 3 });
        assert!(matches!(permit(60_000, "w"), Attempt::Held { .. }));
        assert_eq!(
            update(&p, "x", Update::Renew { ttl_ms: 60_000 }, false, &b()).unwrap(),
            Ok(())
        );
        assert_eq!(
            update(&p, "x", Update::Release, false, &b()).unwrap(),
            Ok(())
        );
        assert_eq!(permit(60_000, "w"), Attempt::Granted { token: 4 });
    }

    #[test]
    fn corrupt_record_is_an_error_not_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(&dir);
        try_acquire(&p, "x", 60_000, Claim::default(), false, &b()).unwrap();
        std::fs::write(&p.record, b"{not json").unwrap();
        let err = try_acquire(&p, "y", 60_000, Claim::default(), false, &b()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
