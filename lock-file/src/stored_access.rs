//! How a grant's or a waiter's access is written in records and queues:
//! `read`, `write`, or `permit:LIMIT` (the semaphore's limit, stored with
//! every permit so that a client asking with another limit is refused).

use distlock_core::Access;
use distlock_core::raw::parse_permits;
use serde::{Deserialize, Serialize};

/// An [`Access`] as stored on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub(crate) struct StoredAccess(pub(crate) Access);

impl From<StoredAccess> for String {
    fn from(stored: StoredAccess) -> String {
        match stored.0 {
            Access::Permit(limit) => format!("permit:{limit}"),
            other => other.as_str().to_owned(),
        }
    }
}

impl TryFrom<String> for StoredAccess {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let access = match text.as_str() {
            "read" => Some(Access::Read),
            "write" => Some(Access::Write),
            other => other
                .strip_prefix("permit:")
                .and_then(parse_permits)
                .map(Access::Permit),
        };
        access
            .map(StoredAccess)
            .ok_or_else(|| format!("unknown access {text:?} (read, write or permit:LIMIT)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_access_reads_back_as_written() {
        for access in [Access::Read, Access::Write, Access::permit(3).unwrap()] {
            let json = serde_json::to_string(&StoredAccess(access)).unwrap();
            let back: StoredAccess = serde_json::from_str(&json).unwrap();
            assert_eq!(back.0, access, "{json}");
        }
        assert_eq!(
            serde_json::to_string(&StoredAccess(Access::permit(3).unwrap())).unwrap(),
            r#""permit:3""#
        );
        for bad in [r#""permit:0""#, r#""permit:""#, r#""admin""#] {
            assert!(serde_json::from_str::<StoredAccess>(bad).is_err(), "{bad}");
        }
    }
}
