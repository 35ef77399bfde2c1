//! The temporary directory each server (or other launched thing) keeps its
//! data, config and log in, deleted when dropped.

use tempfile::TempDir;

use super::LaunchError;

/// A fresh directory named `prefix…` under the system's temp dir; `what`
/// names what it is for in the error.
pub fn temp_dir(prefix: &str, what: &str) -> Result<TempDir, LaunchError> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|source| LaunchError::Io {
            what: what.to_owned(),
            source,
        })
}
