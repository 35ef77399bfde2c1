//! The record kept per lock name, and how it is read and replaced on disk.
//!
//! The record holds the current holder, its lease deadline and the fencing
//! counter in one file, so the counter can never fall behind the holder it
//! was issued to. It is replaced atomically (write a scratch file, fsync it,
//! rename it over the record, fsync the directory): a reader, or a crash,
//! sees the old record or the new one, never a torn one.

use std::fs::{self, File};
use std::io::{self, Write as _};

use serde::{Deserialize, Serialize};

use crate::paths::LockPaths;

/// One lock's state. An absent file is the default: free, counter at 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The random id of the current (or last) acquisition; `None` when released.
    pub(crate) holder: Option<String>,
    /// Wall-clock lease deadline in milliseconds since the Unix epoch:
    /// processes share no monotonic clock.
    pub(crate) deadline_ms: u64,
    /// The last fencing token issued for this name.
    pub(crate) token: u64,
    /// The published value when the name is an election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<Vec<u8>>,
}

impl Record {
    /// The holder id if its lease is still running at `now_ms`.
    pub(crate) fn live_holder(&self, now_ms: u64) -> Option<&str> {
        self.holder.as_deref().filter(|_| now_ms < self.deadline_ms)
    }

    /// Whether `holder` holds a running lease at `now_ms`.
    pub(crate) fn is_held_by(&self, holder: &str, now_ms: u64) -> bool {
        self.live_holder(now_ms) == Some(holder)
    }
}

/// Reads the record; a missing file is a fresh record. A record that does
/// not parse is an error, never silently reset: that would restart the
/// fencing counter.
pub(crate) fn read(paths: &LockPaths) -> io::Result<Record> {
    match fs::read(&paths.record) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "lock record {} is corrupt ({e}); deleting it frees the lock but restarts \
                     its fencing tokens",
                    paths.record.display()
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Record::default()),
        Err(e) => Err(e),
    }
}

/// Replaces the record atomically. Call only while holding the `flock`.
pub(crate) fn write(paths: &LockPaths, record: &Record, fsync: bool) -> io::Result<()> {
    let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
    let mut tmp = File::create(&paths.tmp)?;
    tmp.write_all(&bytes)?;
    if fsync {
        tmp.sync_all()?;
    }
    drop(tmp);
    fs::rename(&paths.tmp, &paths.record)?;
    if fsync {
        File::open(paths.dir())?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_or_released_records_have_no_live_holder() {
        let mut record = Record {
            holder: Some("a".into()),
            deadline_ms: 100,
            token: 7,
            value: None,
        };
        assert!(record.is_held_by("a", 99));
        assert_eq!(record.live_holder(100), None);
        record.holder = None;
        assert_eq!(record.live_holder(0), None);
    }
}
