//! Where one lock's files live: names escaped to safe, reversible file names.
//!
//! A lock name may hold any non-control character, `/` included, and be up to
//! 512 bytes long. Bytes outside `[A-Za-z0-9_-]` are percent-encoded (`/` is
//! `%2F`, `.` is `%2E`, so no name can be `..` or hidden), and the escaped
//! name is cut into directory levels of at most [`SEGMENT`] bytes so no file
//! name exceeds the usual 255-byte limit. Distinct names give distinct paths.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use lock_core::LockName;

/// Longest directory or file stem produced, in bytes (below `NAME_MAX` = 255
/// with room for the `.lock` / `.rec.tmp` suffixes).
const SEGMENT: usize = 200;

/// Locks and elections live in separate key spaces (sub-directories).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Lock,
    Election,
}

impl Space {
    fn dir(self) -> &'static str {
        match self {
            Space::Lock => "locks",
            Space::Election => "elections",
        }
    }
}

/// The files of one lock name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LockPaths {
    /// Locked with `flock` around every read-modify-write; never replaced.
    pub(crate) lock: PathBuf,
    /// The record: holder, lease deadline, fencing counter, election value.
    /// Replaced atomically (write to `tmp`, fsync, rename).
    pub(crate) record: PathBuf,
    /// Scratch file for the atomic replace; only written under the `flock`.
    pub(crate) tmp: PathBuf,
}

impl LockPaths {
    pub(crate) fn new(root: &Path, space: Space, name: &LockName) -> Self {
        let escaped = escape(name.as_str());
        let mut dir = root.join(space.dir());
        let segments = split(&escaped);
        let (last, parents) = segments.split_last().expect("a name is never empty");
        for parent in parents {
            dir.push(parent);
        }
        LockPaths {
            lock: dir.join(format!("{last}.lock")),
            record: dir.join(format!("{last}.rec")),
            tmp: dir.join(format!("{last}.rec.tmp")),
        }
    }

    /// The directory holding the files (created on first use).
    pub(crate) fn dir(&self) -> &Path {
        self.lock.parent().expect("lock paths always have a parent")
    }
}

fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            write!(out, "%{byte:02X}").expect("writing to a String cannot fail");
        }
    }
    out
}

/// Cuts the escaped name into segments of at most [`SEGMENT`] bytes, never
/// inside a `%XX` escape. Every segment but the last is a directory.
fn split(escaped: &str) -> Vec<&str> {
    let bytes = escaped.as_bytes();
    let mut segments = Vec::new();
    let mut start = 0;
    while bytes.len() - start > SEGMENT {
        let mut end = start + SEGMENT;
        // Back off if the cut falls inside "%XX".
        for back in 1..=2 {
            if bytes[end - back] == b'%' {
                end -= back;
                break;
            }
        }
        segments.push(&escaped[start..end]);
        start = end;
    }
    segments.push(&escaped[start..]);
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(name: &str) -> LockPaths {
        LockPaths::new(Path::new("/r"), Space::Lock, &LockName::new(name).unwrap())
    }

    #[test]
    fn readable_names_stay_readable_and_separators_are_escaped() {
        let p = paths("jobs/nightly-report.v2");
        assert_eq!(
            p.record,
            Path::new("/r/locks/jobs%2Fnightly-report%2Ev2.rec")
        );
        assert_eq!(paths("..").lock, Path::new("/r/locks/%2E%2E.lock"));
    }

    #[test]
    fn long_names_are_cut_into_short_segments_without_collisions() {
        let a = paths(&"é".repeat(256));
        let b = paths(&"é".repeat(255));
        assert_ne!(a.record, b.record);
        for p in [&a, &b] {
            for part in p.record.iter() {
                assert!(part.len() <= SEGMENT + 8, "{part:?}");
            }
            let rejoined: String = p
                .record
                .strip_prefix("/r/locks")
                .unwrap()
                .iter()
                .map(|s| s.to_str().unwrap())
                .collect();
            assert!(rejoined.ends_with(".rec"));
            assert!(!rejoined.contains("%%"));
        }
    }

    #[test]
    fn spaces_do_not_share_files() {
        let name = LockName::new("x").unwrap();
        let lock = LockPaths::new(Path::new("/r"), Space::Lock, &name);
        let election = LockPaths::new(Path::new("/r"), Space::Election, &name);
        assert_ne!(lock.record, election.record);
    }
}
