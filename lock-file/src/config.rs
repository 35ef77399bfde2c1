//! Where the lock files live and how leases behave: [`FileConfig`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use distlock_core::raw::{Settings, parse_duration, parse_flag, serde_humane};
use distlock_core::{Error, Result, check_ttl};
use serde::{Deserialize, Serialize};
use url::Url;

/// The default lease TTL of the file backend.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long one file operation (open, lock, read, write, fsync) may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Configuration of a [`FileBackend`](crate::FileBackend).
///
/// Serialized as `dir`, `ttl`, `request_timeout` (durations such as `"10s"`
/// or `"500ms"`; a bare number is seconds), `fsync` and `holder`, the names
/// every distlock config uses. There are no credentials: access is governed by
/// the directory's file permissions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The directory that holds the lock records. Every process that shares
    /// this directory shares the locks. Created if missing.
    pub dir: PathBuf,
    /// Lease TTL used when acquire options leave it unset.
    #[serde(rename = "ttl", with = "serde_humane", default = "default_ttl")]
    pub default_ttl: Duration,
    /// Bound on each file operation, including its wait for a record's OS
    /// lock; a hung filesystem, or a process stuck holding that lock, gives `Timeout`.
    #[serde(with = "serde_humane", default = "default_request_timeout")]
    pub request_timeout: Duration,
    /// `fsync` every record write (and its directory). On by default: it is
    /// what keeps the fencing counter from going back after an OS crash.
    #[serde(default = "default_fsync")]
    pub fsync: bool,
    /// The holder description stored with grants whose acquire options set
    /// none, shown to operators by `inspect` (default `host:pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
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
            holder: None,
        }
    }

    /// The machine-wide default directory, `/var/tmp/distlock`: every
    /// user's processes that use it share its locks, so cron jobs of
    /// different users exclude each other. The lock records go in its
    /// `locks/`, the elections in its `elections/`.
    ///
    /// `connect` creates it sticky and open to every user (`1777`, as
    /// `/var/tmp` is) and refuses it, naming it, if it cannot be used; it
    /// never falls back to another directory. `/var/tmp` survives reboots,
    /// and with it the fencing counters. Every user of the machine can break
    /// the locks in it: a directory of one's own keeps others out (see
    /// docs/security.md).
    pub fn default_dir() -> PathBuf {
        PathBuf::from(crate::sharing::MACHINE_DIR)
    }

    /// Parses `file:///abs/dir[?ttl=10s&request_timeout=5s&fsync=false&holder=LABEL]`.
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
            config
                .apply_option(&key, &value)
                .map_err(|why| Error::invalid_config(format!("file URL {url:?}: {why}")))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Applies the URL option or backend setting `key`.
    fn apply_option(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        let duration = || parse_duration(value).map_err(|why| format!("option {key}: {why}"));
        match key {
            "ttl" => self.default_ttl = duration()?,
            "request_timeout" => self.request_timeout = duration()?,
            "fsync" => self.fsync = parse_flag(key, value)?,
            "holder" => self.holder = Some(value.to_owned()),
            other => {
                return Err(format!(
                    "unknown option {other:?}; known: ttl, request_timeout, fsync, holder"
                ));
            }
        }
        Ok(())
    }

    /// The URL form of this configuration.
    pub fn to_url(&self) -> String {
        let mut url = Url::from_directory_path(&self.dir)
            .map(|u| u.to_string())
            .unwrap_or_else(|()| format!("file://{}", self.dir.display()));
        if url.ends_with('/') && url.len() > "file:///".len() {
            url.pop();
        }
        let mut options = Vec::new();
        if !self.fsync {
            options.push("fsync=false".to_owned());
        }
        if let Some(holder) = &self.holder {
            let holder: String = url::form_urlencoded::byte_serialize(holder.as_bytes()).collect();
            options.push(format!("holder={holder}"));
        }
        if !options.is_empty() {
            url.push('?');
            url.push_str(&options.join("&"));
        }
        url
    }

    /// Sets the default TTL ([`validate`](Self::validate) rejects zero).
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Applies the [`Settings`] the file backend honours over these (`ttl`,
    /// `request_timeout`, `fsync`, `holder`), and refuses the others: access
    /// follows the directory's permissions, and the URL's directory holds
    /// the locks.
    pub fn with_settings(mut self, settings: &Settings) -> Result<Self> {
        settings.refuse_others("file", &["ttl", "request_timeout", "fsync", "holder"])?;
        self.default_ttl = settings.ttl.unwrap_or(self.default_ttl);
        self.request_timeout = settings.request_timeout.unwrap_or(self.request_timeout);
        self.holder = settings.holder.clone().or(self.holder);
        for (name, value) in &settings.options {
            self.apply_option(name, value)
                .map_err(|why| Error::invalid_config(format!("file backend {why}")))?;
        }
        self.validate()?;
        Ok(self)
    }

    /// Sets the bound on each file operation.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets the holder description of grants whose options set none.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
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

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn absolute_url_with_options_parses() {
        let config = FileConfig::from_url("file:///var/lib/dist%20lock?fsync=false").unwrap();
        assert_eq!(config.dir, PathBuf::from("/var/lib/dist lock"));
        assert!(!config.fsync);
        assert_eq!(config.to_url(), "file:///var/lib/dist%20lock?fsync=false");
        let labelled = FileConfig::from_url("file:///x?holder=billing%20worker%263").unwrap();
        assert_eq!(labelled.holder.as_deref(), Some("billing worker&3"));
        assert_eq!(
            FileConfig::from_url(&labelled.to_url()).unwrap(),
            labelled,
            "{}",
            labelled.to_url()
        );
    }

    #[test]
    fn relative_or_malformed_urls_are_invalid_config() {
        for bad in [
            "file://relative/dir",
            "file:///",
            "file:///x?ttl=0",
            "file:///x?ttl=soon",
            "file:///x?prefix=a",
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
            .validate()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn url_options_and_settings_use_the_shared_names() {
        let config = FileConfig::from_url("file:///x?ttl=1500ms&request_timeout=2").unwrap();
        assert_eq!(config.default_ttl, Duration::from_millis(1500));
        assert_eq!(config.request_timeout, Duration::from_secs(2));
        let settings = Settings {
            ttl: Some(Duration::from_secs(4)),
            holder: Some("billing-worker-3".into()),
            options: vec![("fsync".into(), "false".into())],
            ..Settings::default()
        };
        let config = config.with_settings(&settings).unwrap();
        assert_eq!(
            (config.default_ttl, config.fsync),
            (Duration::from_secs(4), false)
        );
        assert_eq!(config.holder.as_deref(), Some("billing-worker-3"));
        let prefix = Settings {
            prefix: Some("p".into()),
            ..Settings::default()
        };
        let err = config.with_settings(&prefix).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }

    #[test]
    fn serde_round_trip_uses_humane_durations() {
        let config = FileConfig::new("/x").with_fsync(false);
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains(r#""ttl":"10s""#), "{json}");
        let back: FileConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config);
        let read: FileConfig = serde_json::from_str(r#"{"dir":"/x","ttl":3}"#).unwrap();
        assert_eq!(read.default_ttl, Duration::from_secs(3));
    }
}
