//! Whether the lock directory tells apart file names that differ only in case.
//!
//! On a case-insensitive filesystem (the default on macOS and Windows; ext4
//! or tmpfs directories with `casefold`), `Job.rec` and `job.rec` are one
//! file. [`probe`] finds out at connect, and [`crate::keys`] then escapes
//! upper-case letters too, so distinct lock names never share a record.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

/// How the filesystem compares file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Case {
    /// `A` and `a` name different files.
    Sensitive,
    /// `A` and `a` name the same file.
    Insensitive,
}

/// Creates a probe file in `dir` and looks it up under a name that differs
/// only in case. Probe names start with `.`, which no escaped lock name does.
///
/// A directory this process may not write to (it can then only read
/// leaders) is taken as case-sensitive, with a warning: nothing is probed.
pub(crate) fn probe(dir: &Path) -> io::Result<Case> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let upper = dir.join(format!(".Case-Probe-{id}"));
    let lower = dir.join(format!(".case-probe-{id}"));
    let created = OpenOptions::new().write(true).create_new(true).open(&upper);
    match created {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            tracing::warn!(
                backend = "file",
                dir = %dir.display(),
                error = %e,
                "cannot create a file in the lock directory to find out whether it folds case; \
                 treating it as case-sensitive"
            );
            return Ok(Case::Sensitive);
        }
        Err(e) => return Err(e),
    }
    let found = fs::symlink_metadata(&lower);
    let removed = fs::remove_file(&upper);
    let case = match found {
        Ok(_) => Case::Insensitive,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Case::Sensitive,
        Err(e) => return Err(e),
    };
    removed?;
    Ok(case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_sensitive_directory_is_detected_and_left_clean() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(probe(dir.path()).unwrap(), Case::Sensitive);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
