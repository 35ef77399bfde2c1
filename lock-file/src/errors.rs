//! Mapping file-system errors to distlock errors that say what to do.

use std::fmt::Display;
use std::io;
use std::path::Path;
use std::time::Duration;

use distlock_core::raw::{Site, human_duration};
use distlock_core::{Error, ErrorKind, LockName};

use crate::store::Gone;

/// The backend's name in error messages and sites.
const BACKEND: &str = "file";

/// An I/O error during `op` on lock `name`, whose files live at `path`.
pub(crate) fn io_error(e: io::Error, op: &str, name: &LockName, path: &Path) -> Error {
    let operation = format!("{op} lock {name}");
    site_io_error(e, &path.display().to_string(), &operation)
}

/// A blocking file task for `op` on lock `name` (files at `path`) that did
/// not finish: it panicked, or took longer than `limit`.
pub(crate) fn unfinished(op: &str, name: &LockName, path: &Path, outcome: Unfinished<'_>) -> Error {
    let operation = format!("{op} lock {name}");
    unfinished_at(&path.display().to_string(), &operation, outcome)
}

/// A renewal of lock `name` (files at `path`) that panicked with `why`:
/// its lease can no longer be vouched for, so it is lost.
pub(crate) fn panicked(op: &str, name: &LockName, path: &Path, why: &str) -> Error {
    let operation = format!("{op} lock {name}");
    Site::new(BACKEND, &path.display().to_string(), &operation).error(
        ErrorKind::LeaseLost,
        format_args!("the renewal panicked ({why}); acquire it again"),
    )
}

/// Why a blocking file task did not finish.
pub(crate) enum Unfinished<'a> {
    /// It panicked or was cancelled.
    Failed(&'a dyn Display),
    /// It outlived its bound.
    TookLonger(Duration),
}

/// The error for a blocking task of `operation` at `address` that did not
/// finish.
pub(crate) fn unfinished_at(address: &str, operation: &str, outcome: Unfinished<'_>) -> Error {
    let site = Site::new(BACKEND, address, operation);
    match outcome {
        Unfinished::Failed(join) => site.error(ErrorKind::Backend, format_args!("failed: {join}")),
        Unfinished::TookLonger(limit) => site.error(
            ErrorKind::Timeout,
            format_args!(
                "took longer than {}; is the filesystem hung?",
                human_duration(limit)
            ),
        ),
    }
}

/// The error for an operation on a grant that is no longer ours; `kind`
/// says what `name` is (`lock`, `semaphore`, `read-write lock`), `path`
/// where its record is.
pub(crate) fn gone_error(
    gone: Gone,
    op: &str,
    kind: &str,
    name: &LockName,
    token: u64,
    path: &Path,
) -> Error {
    let operation = format!("{op} {kind} {name} (token {token})");
    let address = path.display().to_string();
    let site = Site::new(BACKEND, &address, &operation);
    match gone {
        Gone::Expired => site.error(
            ErrorKind::LeaseLost,
            "its lease ran out or was ended from outside; acquire it again",
        ),
        Gone::TakenOver => site.error(
            ErrorKind::LeaseLost,
            "another holder took it over after our lease ran out",
        ),
        Gone::Released => site.error(ErrorKind::NotHeld, "it was already released"),
        Gone::Revoked => site.error(
            ErrorKind::LeaseLost,
            "it was broken by an operator (force_release); acquire it again",
        ),
    }
}

/// An I/O error while preparing the lock directory `dir`.
pub(crate) fn dir_error(e: io::Error, dir: &Path) -> Error {
    site_io_error(
        e,
        &dir.display().to_string(),
        "use it as the lock directory",
    )
}

/// An I/O error while listing the locks in `dir`.
pub(crate) fn list_error(e: io::Error, dir: &str) -> Error {
    site_io_error(e, dir, "list the locks")
}

/// `e` during `operation` at `address`, of the kind that says what to do.
fn site_io_error(e: io::Error, address: &str, operation: &str) -> Error {
    let (kind, hint) = match e.kind() {
        io::ErrorKind::PermissionDenied => (
            ErrorKind::Unauthorized,
            "; check the directory's owner and mode",
        ),
        io::ErrorKind::TimedOut => (ErrorKind::Timeout, ""),
        io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::StorageFull => {
            (ErrorKind::Unavailable, "")
        }
        _ => (ErrorKind::Backend, ""),
    };
    Site::new(BACKEND, address, operation)
        .error(kind, format_args!("{e}{hint}"))
        .with_source(e)
}
