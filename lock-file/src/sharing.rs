//! Lock directories that every user of the machine shares.
//!
//! A lock directory that others may write to (mode `o+w`, as the
//! machine-wide default [`MACHINE_DIR`] is) is shared by every user, so
//! what one user creates in it the next must be able to use, whatever the
//! creator's umask: directories are made `0777`, the `.lock` and `.queue`
//! files (written in place) `0666`, and records `0644`. Records are replaced
//! by `rename`, which needs only write access to their directory, so a
//! record written by one user is replaced by the next. A scratch file left
//! by another user is removed, not written through.
//!
//! The machine-wide directory itself is sticky (`1777`, as `/var/tmp` is):
//! nobody removes or renames another's space directories. Inside a shared
//! directory every user can break every lock, as with any lock file on a
//! machine; docs/security.md says so.
//!
//! In a private directory (not writable by others) nothing is changed:
//! files get the modes the umask gives.

use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The machine-wide default lock directory. `/var/tmp` because it exists
/// on every Unix, every user may create in it, and it survives reboots, and
/// with it the fencing counters (`/run/lock` is emptied at boot).
pub(crate) const MACHINE_DIR: &str = "/var/tmp/distlock";

/// Mode of the machine-wide directory: every user creates in it, nobody
/// removes another's entries.
const MACHINE_DIR_MODE: u32 = 0o1777;
/// Mode of directories created in a shared directory.
const DIR_MODE: u32 = 0o777;
/// Mode of files rewritten in place (`.lock`, `.queue`).
pub(crate) const IN_PLACE_MODE: u32 = 0o666;
/// Mode of records (and their scratch files): replaced, never written in place.
pub(crate) const RECORD_MODE: u32 = 0o644;

/// Who uses a lock directory's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum Sharing {
    /// Only the users the directory's owner let in: the umask decides modes.
    #[default]
    Private,
    /// Every user of the machine: modes are set for them.
    Machine,
}

impl Sharing {
    /// How the existing directory `dir` is shared.
    pub(crate) fn of(dir: &Path) -> io::Result<Sharing> {
        let mode = fs::metadata(dir)?.permissions().mode();
        Ok(if mode & 0o002 != 0 {
            Sharing::Machine
        } else {
            Sharing::Private
        })
    }

    /// Creates `dir` and its missing parents, usable by every user when shared.
    pub(crate) fn create_dirs(self, dir: &Path) -> io::Result<()> {
        if self == Sharing::Private || dir.is_dir() {
            return fs::create_dir_all(dir);
        }
        if let Some(parent) = dir.parent() {
            self.create_dirs(parent)?;
        }
        match fs::create_dir(dir) {
            Ok(()) => fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Gives `file`, just opened, the `mode` every user needs, if it is
    /// this user's to change and does not have it yet.
    pub(crate) fn open_to_all(self, file: &File, mode: u32) -> io::Result<()> {
        if self == Sharing::Private {
            return Ok(());
        }
        if file.metadata()?.permissions().mode() & 0o777 == mode {
            return Ok(());
        }
        match file.set_permissions(Permissions::from_mode(mode)) {
            // Another user's file: its creator set its mode.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
            other => other,
        }
    }
}

/// Creates the machine-wide directory if it is missing, sticky and open to
/// every user, and checks that it is one this process can use. Never falls
/// back to another directory: an error names this one and what is wrong.
pub(crate) fn prepare_machine_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(MACHINE_DIR_MODE))?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "the machine-wide lock directory is not a directory",
        ));
    }
    if meta.permissions().mode() & 0o777 != 0o777 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the machine-wide lock directory has mode {:o}, not 1777, so other users \
                 cannot share its locks; fix it with `chmod 1777 {}`",
                meta.permissions().mode() & 0o7777,
                dir.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_directory_others_may_write_to_is_shared() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Sharing::of(dir.path()).unwrap(), Sharing::Private);
        fs::set_permissions(dir.path(), Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(Sharing::of(dir.path()).unwrap(), Sharing::Machine);
    }

    #[test]
    fn shared_directories_and_files_get_modes_for_every_user_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("locks/a/b");
        Sharing::Machine.create_dirs(&nested).unwrap();
        for level in ["locks", "locks/a", "locks/a/b"] {
            assert_eq!(mode(&dir.path().join(level)), 0o777, "{level}");
        }
        let path = nested.join("x.lock");
        let file = File::create(&path).unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o600)).unwrap();
        Sharing::Machine.open_to_all(&file, IN_PLACE_MODE).unwrap();
        assert_eq!(mode(&path), 0o666);
    }

    #[test]
    fn private_directories_keep_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let file = File::create(&path).unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o600)).unwrap();
        Sharing::Private.open_to_all(&file, IN_PLACE_MODE).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn the_machine_directory_is_made_sticky_and_a_closed_one_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("distlock");
        prepare_machine_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o1777);
        prepare_machine_dir(&dir).unwrap();
        fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let refused = prepare_machine_dir(&dir).unwrap_err();
        assert!(refused.to_string().contains("chmod 1777"), "{refused}");
    }
}
