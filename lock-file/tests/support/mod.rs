//! What the file backend's tests share.

use std::path::Path;
use std::time::Duration;

use distlock_file::{FileBackend, FileConfig};

/// One client of the lock directory `dir`, as a separate process would be:
/// with `ttl` as its default TTL, or the backend's default for `None`.
pub(crate) async fn client(dir: &Path, ttl: Option<Duration>) -> FileBackend {
    let config = FileConfig::new(dir);
    let config = match ttl {
        Some(ttl) => config.with_default_ttl(ttl),
        None => config,
    };
    FileBackend::connect(config).await.expect("connect")
}
