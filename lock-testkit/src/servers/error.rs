//! The error every launcher returns.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Why a server could not be launched (or relaunched).
///
/// The `Display` text says what to do: a missing binary names
/// `scripts/install-servers.sh` and the Debian package to install, and a
/// server that died or never became ready shows the tail of its log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// A binary or jar the launcher needs is not installed.
    #[error(
        "{program} not found {location}; run scripts/install-servers.sh (installs Debian package {package})"
    )]
    Missing {
        /// What is missing, e.g. `etcd`.
        program: String,
        /// Where it was looked for: `on PATH` or `at /some/path`.
        location: String,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// Preparing or spawning the server failed (data directory, log file,
    /// config file, `exec`).
    #[error("could not start {what}: {source}")]
    Io {
        /// What was being done, e.g. `etcd member n1 (127.0.0.1:23790)`.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The server exited while the launcher waited for it to become ready.
    #[error("{what} exited during startup ({status}); last lines of {}:\n{tail}", log.display())]
    Exited {
        /// The server, e.g. `redis-server (127.0.0.1:23790)`.
        what: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        tail: String,
    },
    /// The server did not become ready in time.
    #[error(
        "{what} not ready after {waited:?} (last probe: {last_probe}); last lines of {}:\n{tail}",
        log.display()
    )]
    NotReady {
        /// The server, e.g. `ZooKeeper server 2 (127.0.0.1:23790)`.
        what: String,
        /// How long the launcher waited.
        waited: Duration,
        /// What the last readiness probe saw.
        last_probe: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        tail: String,
    },
}
