//! Where the lock files live and how leases behave: [`FileConfig`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::{Error, Result, check_ttl};
use serde::{Deserialize, Serialize};
use url::Url;

/// The default lease TTL of the file backend.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long one file operation (open, lock, read, write, fsync) may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Configuration of a [`FileBackend`](crate::FileBackend).
///
/// Serialized durations are whole milliseconds (`default_ttl_ms`,
/// `request_timeout_ms`). There are no credentials: access is governed by the
/// directory's file permissions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The directory that holds the lock records. Every process that shares
    /// this directory shares the locks. Created if missing.
    pub dir: PathBuf,
    /// Lease TTL used when acquire options leave it unset.
    #[serde(rename = "default_ttl_ms", with = "millis", default = "default_ttl")]
    pub default_ttl: Duration,
    /// Bound on each file operation, including its wait for a record's OS
    /// lock; a hung filesystem, or a process stuck holding that lock, gives `Timeout`.
    #[serde(
        rename = "request_timeout_ms",
        with = "millis",
        default = "default_request_timeout"
    )]
    pub request_timeout: Duration,
    /// `fsync` every record write (and its directory). On by default: it is
    /// what keeps the fencing counter from going back after an OS crash.
    #[serde(default = "default_fsync")]
    pub fsync: bool,
}

fn default_ttl() -> Duration {
    DEFAULT_TTL
}

fn default_request_timeout() -> Duration {
    DEFAULT_REQUEST_TIMEOUT
}

fn default_fsync() -> bool {
    true
}

impl FileConfig {
    /// Locks kept in `dir`, with the default TTL and timeouts.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileConfig {
            dir: dir.into(),
            default_ttl: DEFAULT_TTL,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            fsync: true,
        }
    }

    /// The per-user default directory: `$XDG_STATE_HOME/distlock`, else
    /// `$HOME/.local/state/distlock`, else `distlock-locks` in the system
    /// temporary directory. The lock records go in its `locks/`, the
    /// elections in its `elections/`.
    ///
    /// A state directory (not `/tmp`) is preferred because it survives
    /// reboots, and with it the fencing counters. For the same reason a
    /// state directory already holding records in the older layout
    /// (`distlock/locks/locks/`) keeps being used: its counters must not
    /// start over.
    pub fn default_dir() -> PathBuf {
        let from = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
        let state = from("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| from("HOME").map(|home| PathBuf::from(home).join(".local").join("state")));
        let Some(state) = state else {
            return std::env::temp_dir().join("distlock-locks");
        };
        let dir = state.join("distlock");
        let older = dir.join("locks");
        if ["locks", "elections"]
            .iter()
            .any(|space| older.join(space).is_dir())
        {
            return older;
        }
        dir
    }

    /// Parses `file:///abs/dir[?fsync=false]`.
    ///
    /// The path must be absolute (three slashes). Percent-escapes in the path
    /// are decoded.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = Url::parse(url).map_err(|e| {
            Error::invalid_config(format!(
                "malformed file URL {url:?}: {e}; expected file:///absolute/dir"
            ))
        })?;
        if parsed.scheme() != "file" {
            return Err(Error::invalid_config(format!(
                "{url:?} is not a file URL; expected file:///absolute/dir"
            )));
        }
        if let Some(host) = parsed
            .host_str()
            .filter(|h| !h.is_empty() && *h != "localhost")
        {
            return Err(Error::invalid_config(format!(
                "file URL {url:?} names host {host:?}; the file backend needs an absolute \
                 path with three slashes, e.g. file:///var/lib/distlock"
            )));
        }
        let dir = parsed.to_file_path().map_err(|()| {
            Error::invalid_config(format!(
                "file URL {url:?} has no usable absolute path; expected file:///absolute/dir"
            ))
        })?;
        if dir == Path::new("/") {
            return Err(Error::invalid_config(format!(
                "file URL {url:?} points at the filesystem root; give a directory for the lock records"
            )));
        }
        let mut config = FileConfig::new(dir);
        for (key, value) in parsed.query_pairs() {
            match key.as_ref() {
                "fsync" => {
                    config.fsync = match value.as_ref() {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => false,
                        other => {
                            return Err(Error::invalid_config(format!(
                                "file URL option fsync={other:?} is not a boolean (true or false)"
                            )));
                        }
                    }
                }
                other => {
                    return Err(Error::invalid_config(format!(
                        "unknown file URL option {other:?}; the only option is fsync=true|false"
                    )));
                }
            }
        }
        Ok(config)
    }

    /// The URL form of this configuration.
    pub fn to_url(&self) -> String {
        let mut url = Url::from_directory_path(&self.dir)
            .map(|u| u.to_string())
            .unwrap_or_else(|()| format!("file://{}", self.dir.display()));
        if url.ends_with('/') && url.len() > "file:///".len() {
            url.pop();
        }
        if !self.fsync {
            url.push_str("?fsync=false");
        }
        url
    }

    /// Sets the default TTL, rejecting zero.
    pub fn with_default_ttl(mut self, ttl: Duration) -> Result<Self> {
        check_ttl(ttl)?;
        self.default_ttl = ttl;
        Ok(self)
    }

    /// Sets the bound on each file operation.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Turns `fsync` of record writes on or off.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Checks the values that can be wrong: a zero TTL or timeout, a relative directory.
    pub fn validate(&self) -> Result<()> {
        check_ttl(self.default_ttl)?;
        if self.request_timeout.is_zero() {
            return Err(Error::invalid_config(
                "file backend request timeout must be greater than zero",
            ));
        }
        if !self.dir.is_absolute() {
            return Err(Error::invalid_config(format!(
                "file backend directory {} is relative; give an absolute path",
                self.dir.display()
            )));
        }
        Ok(())
    }
}

/// `Duration` as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::ErrorKind;

    #[test]
    fn absolute_url_with_options_parses() {
        let config = FileConfig::from_url("file:///var/lib/dist%20lock?fsync=false").unwrap();
        assert_eq!(config.dir, PathBuf::from("/var/lib/dist lock"));
        assert!(!config.fsync);
        assert_eq!(config.to_url(), "file:///var/lib/dist%20lock?fsync=false");
    }

    #[test]
    fn relative_or_malformed_urls_are_invalid_config() {
        for bad in [
            "file://relative/dir",
            "file:///",
            "file:///x?ttl=3",
            "file:///x?fsync=maybe",
            "not a url",
            "redis://host",
        ] {
            let err = FileConfig::from_url(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}: {err}");
        }
    }

    #[test]
    fn zero_ttl_is_rejected() {
        let err = FileConfig::new("/x")
            .with_default_ttl(Duration::ZERO)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn serde_round_trip_uses_milliseconds() {
        let config = FileConfig::new("/x").with_fsync(false);
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains(r#""default_ttl_ms":10000"#), "{json}");
        let back: FileConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config);
    }
}
