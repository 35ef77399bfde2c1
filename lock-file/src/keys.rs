//! Where one lock's files live: names escaped to safe, reversible file names.
//!
//! A lock name may hold any non-control character, `/` included, and be up to
//! 512 bytes long. Bytes outside `[A-Za-z0-9_-]` are percent-encoded (`/` is
//! `%2F`, `.` is `%2E`, so no name can be `..` or hidden), and the escaped
//! name is cut into directory levels of at most [`SEGMENT`] bytes so no file
//! name exceeds the usual 255-byte limit. Distinct names give distinct paths.
//!
//! On a filesystem that folds case, upper-case letters are escaped too
//! (`Job` is `%4Aob`): escapes use upper-case hex digits and every other
//! letter left is lower-case, so even folded, distinct names stay distinct.
//! Names without upper-case letters keep the same files either way.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use distlock_core::LockName;
pub(crate) use distlock_core::raw::Space;

use crate::case::Case;
use crate::sharing::Sharing;

/// Longest directory or file stem produced, in bytes (below `NAME_MAX` = 255
/// with room for the `.lock` / `.rec.tmp` suffixes).
const SEGMENT: usize = 200;

/// The spaces whose records have one holder ([`crate::record`]), the ones
/// operators inspect and break.
pub(crate) const SINGLE_SPACES: [Space; 2] = [Space::Lock, Space::Election];

/// What a name in `space` is, for messages (an election's leadership is a
/// lock).
pub(crate) fn kind(space: Space) -> &'static str {
    match space {
        Space::Lock | Space::Election => "lock",
        Space::Semaphore => "semaphore",
        Space::RwLock => "read-write lock",
    }
}

/// The files of one lock name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LockPaths {
    /// The space they are in, which says what their record holds.
    pub(crate) space: Space,
    /// Locked with `flock` around every read-modify-write; never replaced.
    pub(crate) lock: PathBuf,
    /// The record: holder, lease deadline, fencing counter, election value.
    /// Replaced atomically (write to `tmp`, fsync, rename).
    pub(crate) record: PathBuf,
    /// Scratch file for the atomic replace; only written under the `flock`.
    pub(crate) tmp: PathBuf,
    /// The waiters' queue, rewritten in place under the `flock`, never `fsync`ed.
    pub(crate) queue: PathBuf,
    /// On a filesystem that folds case, where the record of a name with
    /// upper-case letters was kept before they were escaped: its fencing
    /// counter is where this name's counter continues from.
    pub(crate) legacy_record: Option<PathBuf>,
    /// Who else uses these files, which decides the modes they are given.
    pub(crate) sharing: Sharing,
}

impl LockPaths {
    pub(crate) fn new(root: &Path, space: Space, name: &LockName, case: Case) -> Self {
        let mut paths = files(root, space, &escape(name.as_str(), case));
        paths.legacy_record = (case == Case::Insensitive)
            .then(|| files(root, space, &escape(name.as_str(), Case::Sensitive)).record)
            .filter(|legacy| *legacy != paths.record);
        paths
    }

    /// The directory holding the files (created on first use).
    pub(crate) fn dir(&self) -> &Path {
        self.lock.parent().expect("lock paths always have a parent")
    }

    /// The same files, used by those `sharing` says.
    pub(crate) fn shared_as(mut self, sharing: Sharing) -> Self {
        self.sharing = sharing;
        self
    }
}

/// The files of the escaped name `escaped`.
fn files(root: &Path, space: Space, escaped: &str) -> LockPaths {
    let mut dir = root.join(space.dir());
    let segments = split(escaped);
    let (last, parents) = segments.split_last().expect("a name is never empty");
    for parent in parents {
        dir.push(parent);
    }
    LockPaths {
        space,
        lock: dir.join(format!("{last}.lock")),
        record: dir.join(format!("{last}.rec")),
        tmp: dir.join(format!("{last}.rec.tmp")),
        queue: dir.join(format!("{last}.queue")),
        legacy_record: None,
        sharing: Sharing::Private,
    }
}

/// The lock name stored in the file at `relative` (its path under the
/// space's directory: directory levels, then `STEM.rec` or `STEM.queue`),
/// or `None` for any other file. Reverses [`LockPaths::new`] on either case.
pub(crate) fn name_of(relative: &Path) -> Option<LockName> {
    let mut parts: Vec<&str> = relative.iter().map(|p| p.to_str()).collect::<Option<_>>()?;
    let last = parts.pop()?;
    let stem = last
        .strip_suffix(".rec")
        .or_else(|| last.strip_suffix(".queue"))?;
    parts.push(stem);
    let escaped = parts.concat();
    let bytes = escaped.as_bytes();
    let mut name = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = escaped.get(i + 1..i + 3)?;
            name.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            name.push(bytes[i]);
            i += 1;
        }
    }
    LockName::new(String::from_utf8(name).ok()?).ok()
}

fn escape(name: &str, case: Case) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        let kept = match case {
            Case::Sensitive => byte.is_ascii_alphanumeric(),
            Case::Insensitive => byte.is_ascii_lowercase() || byte.is_ascii_digit(),
        };
        if kept || byte == b'_' || byte == b'-' {
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
        paths_on(name, Case::Sensitive)
    }

    fn paths_on(name: &str, case: Case) -> LockPaths {
        LockPaths::new(
            Path::new("/r"),
            Space::Lock,
            &LockName::new(name).unwrap(),
            case,
        )
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
    fn distinct_names_never_share_a_file_even_when_case_is_folded() {
        let names = [
            "Job", "job", "JOB", "jOb", "a/B", "a/b", "%41", "%61", "A", "a", "\u{C9}", "\u{E9}",
        ];
        let long: Vec<String> = ["X", "x"].iter().map(|c| c.repeat(300)).collect();
        let all: Vec<&str> = names
            .iter()
            .copied()
            .chain(long.iter().map(String::as_str))
            .collect();
        let folded = |name: &str| {
            let p = paths_on(name, Case::Insensitive);
            p.record.to_string_lossy().to_lowercase()
        };
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(folded(a), folded(b), "{a:?} and {b:?} share a file");
            }
        }
    }

    #[test]
    fn folding_case_escapes_only_upper_case_letters_and_remembers_the_old_file() {
        let p = paths_on("Jobs/nightly-Report", Case::Insensitive);
        assert_eq!(
            p.record,
            Path::new("/r/locks/%4Aobs%2Fnightly-%52eport.rec")
        );
        assert_eq!(
            p.legacy_record.as_deref(),
            Some(Path::new("/r/locks/Jobs%2Fnightly-Report.rec"))
        );
        let lower = paths_on("jobs/nightly", Case::Insensitive);
        assert_eq!(lower.record, paths("jobs/nightly").record);
        assert_eq!(lower.legacy_record, None);
        assert_eq!(paths("Job").legacy_record, None);
    }

    #[test]
    fn names_are_read_back_from_their_files() {
        let long = "é".repeat(250);
        for name in ["jobs/nightly-report.v2", "..", "Job", long.as_str()] {
            for case in [Case::Sensitive, Case::Insensitive] {
                let p = paths_on(name, case);
                for file in [&p.record, &p.queue] {
                    let relative = file.strip_prefix("/r/locks").unwrap();
                    let back = name_of(relative).map(|n| n.as_str().to_owned());
                    assert_eq!(back.as_deref(), Some(name), "{}", file.display());
                }
                for other in [&p.lock, &p.tmp] {
                    assert_eq!(name_of(other.strip_prefix("/r/locks").unwrap()), None);
                }
            }
        }
        assert_eq!(name_of(Path::new(".case-probe-1")), None);
    }

    #[test]
    fn spaces_do_not_share_files() {
        let name = LockName::new("x").unwrap();
        let lock = LockPaths::new(Path::new("/r"), Space::Lock, &name, Case::Sensitive);
        let others = [Space::Election, Space::Semaphore, Space::RwLock]
            .map(|space| LockPaths::new(Path::new("/r"), space, &name, Case::Sensitive).record);
        assert!(!others.contains(&lock.record), "{others:?}");
        assert!(others[1..].iter().all(|r| *r != others[0]) && others[1] != others[2]);
    }
}
