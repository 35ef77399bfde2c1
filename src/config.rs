//! [`Config`]: the backend URL plus TTL, timeouts, credentials and TLS paths,
//! from a TOML file, the environment, or code.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::{Error, Result, check_ttl};
use serde::{Deserialize, Serialize};

use crate::duration::{parse_duration, serde_opt};
use crate::redact::{redact_url, secret};

/// Environment variables read by [`Config::from_env`].
pub const ENV_VARS: [&str; 13] = [
    "DISTLOCK_URL",
    "DISTLOCK_TTL",
    "DISTLOCK_CONNECT_TIMEOUT",
    "DISTLOCK_REQUEST_TIMEOUT",
    "DISTLOCK_USERNAME",
    "DISTLOCK_PASSWORD",
    "DISTLOCK_PREFIX",
    "DISTLOCK_LAYOUT",
    "DISTLOCK_HOLDER",
    "DISTLOCK_TLS_CA",
    "DISTLOCK_TLS_CERT",
    "DISTLOCK_TLS_KEY",
    "DISTLOCK_FSYNC",
];

/// How to reach a backend. Every field is optional: unset fields keep the
/// backend's defaults (or what the URL says), and a missing URL means the
/// embedded default, the file backend in [`lock_file::FileConfig::default_dir`].
///
/// In TOML, durations are humane strings (`ttl = "10s"`):
///
/// ```
/// let config = distlock::Config::from_toml_str(r#"
///     url = "redis://127.0.0.1:6379/0"
///     ttl = "15s"
///     request_timeout = "2s"
///     username = "app"
///     password = "s3cret"
///     [tls]
///     ca = "/etc/ssl/ca.pem"
/// "#).unwrap();
/// assert_eq!(config.ttl, Some(std::time::Duration::from_secs(15)));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
///
/// Settings given explicitly here win over the same settings in the URL.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Backend URL (`memory://`, `file:///dir`, `etcd://...`, `redis://...`,
    /// `rediss://...`, `redlock://...`, `redis+cluster://...`, `zk://...`).
    pub url: Option<String>,
    /// Default lease TTL.
    #[serde(with = "serde_opt", skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Duration>,
    /// Bound on establishing the connection (network backends).
    #[serde(with = "serde_opt", skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Duration>,
    /// Bound on each request to the backend.
    #[serde(with = "serde_opt", skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Duration>,
    /// User name for backends with authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password; never shown in `Debug`, logs or messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Key prefix (etcd, Redis) or base node (ZooKeeper) for the locks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Key layout, for sharing locks with other clients of the same server:
    /// `distlock` (the default), `concurrency` (etcd: the layout of etcd's
    /// concurrency package and `etcdctl lock`) or `curator` (ZooKeeper:
    /// Apache Curator's recipes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Holder description stored with every grant, shown to operators by
    /// `distlock status` (default `host:pid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// `fsync` record writes (file backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsync: Option<bool>,
    /// TLS files for backends that support TLS.
    #[serde(skip_serializing_if = "TlsConfig::is_empty")]
    pub tls: TlsConfig,
}

/// Paths of the TLS files (PEM).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// CA certificate(s) to trust.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Client certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Client private key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl TlsConfig {
    /// Whether no TLS file is set.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url.as_deref().map(redact_url))
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("username", &self.username)
            .field("password", &secret(&self.password))
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("holder", &self.holder)
            .field("fsync", &self.fsync)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Config {
    /// A config that only names a URL.
    pub fn from_url(url: impl Into<String>) -> Self {
        Config {
            url: Some(url.into()),
            ..Config::default()
        }
    }

    /// Parses TOML text (see the type's docs for the keys).
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let config: Config = toml::from_str(text).map_err(|e| {
            Error::invalid_config(format!(
                "invalid distlock config: {}",
                one_line(&e.to_string())
            ))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a TOML config file.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid_config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        Self::from_toml_str(&text).map_err(|e| {
            Error::invalid_config(format!("config file {}: {}", path.display(), e.message()))
        })
    }

    /// Reads the `DISTLOCK_*` environment variables ([`ENV_VARS`]); unset or
    /// empty ones stay `None`.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// As [`from_env`](Self::from_env), reading variables through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |key: &str| lookup(key).filter(|v| !v.trim().is_empty());
        let duration = |key: &str| -> Result<Option<Duration>> {
            get(key)
                .map(|v| {
                    parse_duration(&v)
                        .map_err(|e| Error::invalid_config(format!("{key}: {}", e.message())))
                })
                .transpose()
        };
        let fsync = match get("DISTLOCK_FSYNC").as_deref() {
            None => None,
            Some("1" | "true" | "yes") => Some(true),
            Some("0" | "false" | "no") => Some(false),
            Some(other) => {
                return Err(Error::invalid_config(format!(
                    "DISTLOCK_FSYNC={other:?} is not a boolean (true or false)"
                )));
            }
        };
        let config = Config {
            url: get("DISTLOCK_URL"),
            ttl: duration("DISTLOCK_TTL")?,
            connect_timeout: duration("DISTLOCK_CONNECT_TIMEOUT")?,
            request_timeout: duration("DISTLOCK_REQUEST_TIMEOUT")?,
            username: get("DISTLOCK_USERNAME"),
            password: get("DISTLOCK_PASSWORD"),
            prefix: get("DISTLOCK_PREFIX"),
            layout: get("DISTLOCK_LAYOUT"),
            holder: get("DISTLOCK_HOLDER"),
            fsync,
            tls: TlsConfig {
                ca: get("DISTLOCK_TLS_CA").map(PathBuf::from),
                cert: get("DISTLOCK_TLS_CERT").map(PathBuf::from),
                key: get("DISTLOCK_TLS_KEY").map(PathBuf::from),
            },
        };
        for (key, value) in [
            ("DISTLOCK_TTL", config.ttl),
            ("DISTLOCK_CONNECT_TIMEOUT", config.connect_timeout),
            ("DISTLOCK_REQUEST_TIMEOUT", config.request_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(Error::invalid_config(format!(
                    "{key}: must be greater than zero"
                )));
            }
        }
        config.validate().map_err(|e| {
            Error::invalid_config(format!("DISTLOCK_* environment: {}", e.message()))
        })?;
        Ok(config)
    }

    /// `self`, with every setting that `over` sets taken from `over`.
    pub fn overlay(self, over: Config) -> Config {
        Config {
            url: over.url.or(self.url),
            ttl: over.ttl.or(self.ttl),
            connect_timeout: over.connect_timeout.or(self.connect_timeout),
            request_timeout: over.request_timeout.or(self.request_timeout),
            username: over.username.or(self.username),
            password: over.password.or(self.password),
            prefix: over.prefix.or(self.prefix),
            layout: over.layout.or(self.layout),
            holder: over.holder.or(self.holder),
            fsync: over.fsync.or(self.fsync),
            tls: TlsConfig {
                ca: over.tls.ca.or(self.tls.ca),
                cert: over.tls.cert.or(self.tls.cert),
                key: over.tls.key.or(self.tls.key),
            },
        }
    }

    /// Rejects zero TTLs and timeouts.
    pub fn validate(&self) -> Result<()> {
        if let Some(ttl) = self.ttl {
            check_ttl(ttl)?;
        }
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("request timeout", self.request_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(Error::invalid_config(format!(
                    "the {what} must be greater than zero"
                )));
            }
        }
        Ok(())
    }

    /// The settings beyond the URL, in the vocabulary every backend applies
    /// (each refuses those it has no use for).
    pub fn settings(&self) -> lock_core::raw::Settings {
        lock_core::raw::Settings {
            ttl: self.ttl,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            username: self.username.clone(),
            password: self.password.clone(),
            prefix: self.prefix.clone(),
            layout: self.layout.clone(),
            holder: self.holder.clone(),
            fsync: self.fsync,
            tls_ca: self.tls.ca.clone(),
            tls_cert: self.tls.cert.clone(),
            tls_key: self.tls.key.clone(),
        }
    }

    /// The URL to connect to: the configured one, else the embedded default
    /// (`file://` in [`lock_file::FileConfig::default_dir`]).
    pub fn effective_url(&self) -> String {
        self.url.clone().unwrap_or_else(default_url)
    }

    /// The effective URL with any password masked, for messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.effective_url())
    }
}

/// The embedded default backend: lock files in the per-user state directory.
pub fn default_url() -> String {
    lock_file::FileConfig::new(lock_file::FileConfig::default_dir()).to_url()
}

fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '|' || c == '^' || c == ' '))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::ErrorKind;
    use std::collections::HashMap;

    #[test]
    fn env_reads_every_setting_and_redacts_the_password() {
        let env: HashMap<&str, &str> = [
            ("DISTLOCK_URL", "redis://app:pw1@127.0.0.1:6379"),
            ("DISTLOCK_TTL", "15s"),
            ("DISTLOCK_CONNECT_TIMEOUT", "500ms"),
            ("DISTLOCK_REQUEST_TIMEOUT", "2"),
            ("DISTLOCK_USERNAME", "app"),
            ("DISTLOCK_PASSWORD", "pw2"),
            ("DISTLOCK_PREFIX", "/jobs"),
            ("DISTLOCK_TLS_CA", "/ca.pem"),
            ("DISTLOCK_FSYNC", "false"),
        ]
        .into();
        let config = Config::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(config.ttl, Some(Duration::from_secs(15)));
        assert_eq!(config.connect_timeout, Some(Duration::from_millis(500)));
        assert_eq!(config.request_timeout, Some(Duration::from_secs(2)));
        assert_eq!(config.tls.ca.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(config.fsync, Some(false));
        let debug = format!("{config:?}");
        assert!(!debug.contains("pw1") && !debug.contains("pw2"), "{debug}");
    }

    /// Tools clear [`ENV_VARS`] to run distlock in a clean environment (the
    /// CLI tests do): a variable read but not listed would leak through.
    #[test]
    fn env_vars_lists_every_variable_read() {
        let read = std::sync::Mutex::new(Vec::new());
        Config::from_lookup(|key| {
            read.lock().unwrap().push(key.to_owned());
            None
        })
        .unwrap();
        let mut read = read.into_inner().unwrap();
        read.sort();
        read.dedup();
        let mut listed: Vec<String> = ENV_VARS.iter().map(|v| (*v).to_owned()).collect();
        listed.sort();
        assert_eq!(read, listed);
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        let err =
            Config::from_lookup(|k| (k == "DISTLOCK_TTL").then(|| "soon".into())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().starts_with("DISTLOCK_TTL"), "{err}");
        let err = Config::from_lookup(|k| (k == "DISTLOCK_TTL").then(|| "0".into())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn toml_rejects_unknown_keys_in_one_line() {
        let err = Config::from_toml_str("url = \"memory://\"\ntll = \"3s\"\n").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("tll"), "{err}");
        assert!(!err.message().contains('\n'), "{err}");
    }

    #[test]
    fn overlay_prefers_the_upper_layer() {
        let file =
            Config::from_toml_str("url = \"memory://\"\nttl = \"3s\"\nprefix = \"a\"").unwrap();
        let env = Config {
            ttl: Some(Duration::from_secs(9)),
            ..Config::default()
        };
        let merged = file.overlay(env);
        assert_eq!(merged.url.as_deref(), Some("memory://"));
        assert_eq!(merged.ttl, Some(Duration::from_secs(9)));
        assert_eq!(merged.prefix.as_deref(), Some("a"));
    }

    #[test]
    fn toml_round_trips() {
        let config =
            Config::from_toml_str("url = \"etcd://h:1\"\nttl = \"1500ms\"\n[tls]\nca = \"/x\"")
                .unwrap();
        let text = toml::to_string(&config).unwrap();
        assert_eq!(Config::from_toml_str(&text).unwrap(), config);
    }

    #[test]
    fn default_url_is_the_file_backend() {
        assert!(Config::default().effective_url().starts_with("file:///"));
    }
}
