//! The record kept per lock name, and how it is read and replaced on disk.
//!
//! The record holds the current holder, its lease deadline and the fencing
//! counter in one file, so the counter can never fall behind the holder it
//! was issued to. It is replaced atomically (write a scratch file, fsync it,
//! rename it over the record, fsync the directory): a reader, or a crash,
//! sees the old record or the new one, never a torn one.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Now;
use crate::keys::LockPaths;
use crate::sharing::{RECORD_MODE, Sharing};

/// One lock's state. An absent file is the default: free, counter at 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The random id of the current (or last) acquisition; `None` when released.
    pub(crate) holder: Option<String>,
    /// When the lease ends.
    #[serde(flatten)]
    pub(crate) lease: Deadline,
    /// The last fencing token issued for this name.
    pub(crate) token: u64,
    /// The published value when the name is an election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<Vec<u8>>,
    /// Who holds it, for operators: the holder's label, by default `host:pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// When the holder took the lock, in wall-clock milliseconds since the
    /// Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) acquired_ms: Option<u64>,
    /// Holders evicted by an operator whose leases would still be running:
    /// kept (across later grants) until then, so that each learns it was
    /// revoked rather than that its lease ran out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) revoked: Vec<Revoked>,
}

/// A holder evicted by `force_release`, remembered until its lease would
/// have ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Revoked {
    pub(crate) holder: String,
    #[serde(flatten)]
    pub(crate) lease: Deadline,
}

/// A deadline kept on both clocks (see [`crate::clock`]): lease ends in
/// records and waiters' places in queues.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Deadline {
    /// On the wall clock, in milliseconds since the Unix epoch; it decides
    /// only where `boot` cannot.
    pub(crate) deadline_ms: u64,
    /// On the boot clock of the boot that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) boot: Option<BootDeadline>,
}

impl Deadline {
    /// The deadline `ms` after `now`, on both clocks.
    pub(crate) fn after(now: &Now, ms: u64) -> Deadline {
        Deadline {
            deadline_ms: now.wall_ms.saturating_add(ms),
            boot: now.boot.map(|boot| BootDeadline {
                id: boot.id.to_owned(),
                deadline_ms: boot.ms.saturating_add(ms),
            }),
        }
    }

    /// How long from `now` until the deadline (0 once it passed): on the
    /// boot clock if it was written in this boot, else on the wall clock.
    pub(crate) fn remaining_ms(&self, now: &Now) -> u64 {
        match (&self.boot, &now.boot) {
            (Some(deadline), Some(boot)) if deadline.id == boot.id => {
                deadline.deadline_ms.saturating_sub(boot.ms)
            }
            _ => self.deadline_ms.saturating_sub(now.wall_ms),
        }
    }

    /// Whether the deadline is still ahead at `now`.
    pub(crate) fn is_ahead(&self, now: &Now) -> bool {
        self.remaining_ms(now) > 0
    }
}

/// A lease deadline on `CLOCK_BOOTTIME`, valid only in the boot (and time
/// namespace) named by `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BootDeadline {
    pub(crate) id: String,
    pub(crate) deadline_ms: u64,
}

impl Record {
    /// How long the lease runs from `now` (0 once it ended).
    pub(crate) fn remaining_ms(&self, now: &Now) -> u64 {
        self.lease.remaining_ms(now)
    }

    /// The holder id if its lease is still running at `now`.
    pub(crate) fn live_holder(&self, now: &Now) -> Option<&str> {
        self.holder.as_deref().filter(|_| self.lease.is_ahead(now))
    }

    /// Whether `holder` holds a running lease at `now`.
    pub(crate) fn is_held_by(&self, holder: &str, now: &Now) -> bool {
        self.live_holder(now) == Some(holder)
    }

    /// Sets the lease to end `ttl_ms` after `now`, on both clocks.
    pub(crate) fn set_deadline(&mut self, now: &Now, ttl_ms: u64) {
        self.lease = Deadline::after(now, ttl_ms);
    }

    /// Ends the lease now, on both clocks.
    pub(crate) fn end_lease(&mut self) {
        self.lease = Deadline::default();
    }

    /// Whether `holder` was evicted by an operator (and its lease would
    /// still be running).
    pub(crate) fn was_revoked(&self, holder: &str, now: &Now) -> bool {
        self.revoked
            .iter()
            .any(|r| r.holder == holder && r.lease.is_ahead(now))
    }

    /// Evicts the running holder: frees the lock, keeps the fencing counter,
    /// and remembers whom it evicted. Returns the evicted record.
    pub(crate) fn revoke(&mut self, now: &Now) -> Option<Record> {
        let holder = self.live_holder(now)?.to_owned();
        let evicted = self.clone();
        self.revoked.retain(|r| r.lease.is_ahead(now));
        self.revoked.push(Revoked {
            holder,
            lease: self.lease.clone(),
        });
        self.free();
        Some(evicted)
    }

    /// No holder, no lease, no value; the counter and the evictions stay.
    pub(crate) fn free(&mut self) {
        self.holder = None;
        self.end_lease();
        self.value = None;
        self.description = None;
        self.acquired_ms = None;
    }

    /// The evictions still worth remembering at `now`, for the next record.
    pub(crate) fn live_revocations(&self, now: &Now) -> Vec<Revoked> {
        self.revoked
            .iter()
            .filter(|r| r.lease.is_ahead(now))
            .cloned()
            .collect()
    }
}

/// Reads the record; a missing file is a fresh record, whose fencing
/// counter continues from the name's legacy record if there is one. A
/// record that does not parse is an error, never silently reset: that would
/// restart the fencing counter.
pub(crate) fn read(paths: &LockPaths) -> io::Result<Record> {
    if let Some(record) = read_file(&paths.record)? {
        return Ok(record);
    }
    let token = match &paths.legacy_record {
        Some(legacy) => read_file::<Record>(legacy)?.map_or(0, |r| r.token),
        None => 0,
    };
    Ok(Record {
        token,
        ..Record::default()
    })
}

/// Reads the record file at `path` (a [`Record`] or, in the shared spaces, a
/// [`SharedRecord`](crate::shares::SharedRecord)); `None` if there is none.
pub(crate) fn read_file<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "lock record {} is corrupt ({e}); deleting it frees the lock but restarts \
                     its fencing tokens",
                    path.display()
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// How far a record write goes to make itself durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// No `fsync` (`fsync=false`): an OS crash may lose the write.
    Unsynced,
    /// `fsync` the record, then its directory after the `rename`.
    Synced,
    /// `fsync` the record before the `rename` (so a crash leaves the old or
    /// the new record, never a torn one), and leave the directory's `fsync`
    /// to the caller, who does it once for a batch of writes before it
    /// reports any of them done.
    DirectoryLater,
}

impl From<bool> for Durability {
    /// The durability the `fsync` setting asks for.
    fn from(fsync: bool) -> Self {
        if fsync {
            Durability::Synced
        } else {
            Durability::Unsynced
        }
    }
}

/// Replaces the record (of either kind) atomically. Call only while holding
/// the `flock`.
pub(crate) fn write(
    paths: &LockPaths,
    record: &impl Serialize,
    durability: Durability,
) -> io::Result<()> {
    let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
    let mut tmp = create_scratch(paths)?;
    tmp.write_all(&bytes)?;
    // A scratch file left by a crash may be longer, and some FAT drivers
    // (fusefat) ignore `O_TRUNC`: its tail would corrupt the record.
    cut_to(&tmp, bytes.len())?;
    if durability != Durability::Unsynced {
        tmp.sync_all()?;
    }
    drop(tmp);
    fs::rename(&paths.tmp, &paths.record)?;
    if durability == Durability::Synced {
        sync_dir(paths.dir())?;
    }
    Ok(())
}

/// Opens the record's scratch file, emptied. In a shared directory, one
/// another user left is removed first (only its owner may write it; anyone
/// may remove it), and the scratch is made readable by all, since it
/// becomes the record.
fn create_scratch(paths: &LockPaths) -> io::Result<File> {
    let tmp = match File::create(&paths.tmp) {
        Err(e)
            if e.kind() == io::ErrorKind::PermissionDenied && paths.sharing == Sharing::Machine =>
        {
            fs::remove_file(&paths.tmp)?;
            File::create(&paths.tmp)?
        }
        other => other?,
    };
    paths.sharing.open_to_all(&tmp, RECORD_MODE)?;
    Ok(tmp)
}

/// Makes the renames done in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Cuts `file` to `len` bytes if it is longer: what `O_TRUNC` before the
/// write should have done, for drivers that ignore it. Only when longer:
/// fusefat refuses (`EPERM`) to truncate a file to the size it has.
pub(crate) fn cut_to(file: &File, len: usize) -> io::Result<()> {
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if file.metadata()?.len() > len {
        file.set_len(len)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::BootNow;

    fn at(wall_ms: u64, boot: Option<(&'static str, u64)>) -> Now {
        Now {
            wall_ms,
            boot: boot.map(|(id, ms)| BootNow { id, ms }),
        }
    }

    fn held_by_a(written: &Now, ttl_ms: u64) -> Record {
        let mut record = Record {
            holder: Some("a".into()),
            token: 7,
            ..Record::default()
        };
        record.set_deadline(written, ttl_ms);
        record
    }

    #[test]
    fn expired_or_released_records_have_no_live_holder() {
        let mut record = held_by_a(&at(0, None), 100);
        assert!(record.is_held_by("a", &at(99, None)));
        assert_eq!(record.live_holder(&at(100, None)), None);
        record.holder = None;
        assert_eq!(record.live_holder(&at(0, None)), None);
    }

    #[test]
    fn in_the_same_boot_wall_clock_steps_move_no_deadline() {
        let record = held_by_a(&at(100_000_000, Some(("boot", 50))), 100);
        // The wall clock stepped back a day: still over at boot time 150.
        assert_eq!(
            record.live_holder(&at(100_000_000 - 86_400_000, Some(("boot", 150)))),
            None
        );
        // The wall clock stepped forward a day: still running at boot time 149.
        assert!(record.is_held_by("a", &at(100_000_000 + 86_400_000, Some(("boot", 149)))));
    }

    #[test]
    fn another_boot_or_no_boot_clock_falls_back_to_the_wall_clock() {
        let record = held_by_a(&at(1_000, Some(("boot", 50))), 100);
        assert!(record.is_held_by("a", &at(1_099, Some(("other boot", 0)))));
        assert_eq!(
            record.live_holder(&at(1_100, Some(("other boot", 0)))),
            None
        );
        assert!(record.is_held_by("a", &at(1_099, None)));
        // A record written by an older version has no boot deadline.
        let old: Record =
            serde_json::from_str(r#"{"holder":"a","deadline_ms":1100,"token":3}"#).unwrap();
        assert!(old.is_held_by("a", &at(1_099, Some(("boot", 0)))));
        assert_eq!(old.live_holder(&at(1_100, Some(("boot", 0)))), None);
    }

    #[test]
    fn deadlines_are_stored_inline_as_older_versions_read_them() {
        let mut record = held_by_a(&at(1_000, Some(("boot", 50))), 100);
        record.revoke(&at(1_010, Some(("boot", 60))));
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["deadline_ms"], 0, "{json}");
        assert_eq!(json["revoked"][0]["holder"], "a", "{json}");
        assert_eq!(json["revoked"][0]["deadline_ms"], 1_100, "{json}");
        assert_eq!(json["revoked"][0]["boot"]["deadline_ms"], 150, "{json}");
    }
}
