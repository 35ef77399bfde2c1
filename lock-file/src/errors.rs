//! Mapping file-system errors to distlock errors that say what to do.

use std::io;
use std::path::Path;

use lock_core::{Error, LockName};

use crate::store::Gone;

/// An I/O error during `op` on lock `name`, whose files live at `path`.
pub(crate) fn io_error(e: io::Error, op: &str, name: &LockName, path: &Path) -> Error {
    let at = path.display();
    let message = match e.kind() {
        io::ErrorKind::PermissionDenied => {
            return Error::unauthorized(format!(
                "file backend: no permission to {op} lock {name} at {at}: {e}; \
                 check the directory's owner and mode"
            ))
            .with_source(e);
        }
        io::ErrorKind::InvalidData => format!("file backend: cannot {op} lock {name}: {e}"),
        io::ErrorKind::TimedOut => {
            return Error::timeout(format!("file backend: cannot {op} lock {name}: {e}"))
                .with_source(e);
        }
        io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::StorageFull => {
            return Error::unavailable(format!(
                "file backend: cannot {op} lock {name} at {at}: {e}"
            ))
            .with_source(e);
        }
        _ => format!("file backend: cannot {op} lock {name} at {at}: {e}"),
    };
    Error::backend(message).with_source(e)
}

/// The error for an operation on a grant that is no longer ours; `kind`
/// says what `name` is (`lock`, `semaphore`, `read-write lock`).
pub(crate) fn gone_error(gone: Gone, op: &str, kind: &str, name: &LockName, token: u64) -> Error {
    match gone {
        Gone::Expired => Error::lease_lost(format!(
            "file backend: cannot {op} {kind} {name} (token {token}): its lease ran out or was \
             ended from outside; acquire it again"
        )),
        Gone::TakenOver => Error::lease_lost(format!(
            "file backend: cannot {op} {kind} {name} (token {token}): another holder took it over \
             after our lease ran out"
        )),
        Gone::Released => Error::not_held(format!(
            "file backend: cannot {op} {kind} {name} (token {token}): it was already released"
        )),
        Gone::Revoked => Error::lease_lost(format!(
            "file backend: cannot {op} {kind} {name} (token {token}): it was broken by an \
             operator (force_release); acquire it again"
        )),
    }
}

/// An I/O error while preparing the lock directory `dir`.
pub(crate) fn dir_error(e: io::Error, dir: &Path) -> Error {
    let message = format!(
        "file backend: cannot use {} as the lock directory: {e}",
        dir.display()
    );
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            Error::unauthorized(format!("{message}; check the directory's owner and mode"))
        }
        io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::StorageFull => {
            Error::unavailable(message)
        }
        _ => Error::backend(message),
    }
    .with_source(e)
}
