//! [`Settings`]: the client settings every networked backend honours, and
//! [`SETTINGS`], the one table of setting names.
//!
//! A config file, the environment or command-line flags fill one
//! `Settings`. The shared client settings are its fields; a backend's own
//! settings (`layout`, `fsync`, `fair`, `tls.*`, `schema`, ...) travel as text in
//! [`Settings::options`] and are parsed by the backend, with the parser of
//! its URL options. A backend refuses a setting it has no use for, so a
//! setting never silently does nothing.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::{parse_duration, serde_humane};
use crate::{Error, Result};

/// Who honours a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingScope {
    /// Every networked backend: a field of [`Settings`].
    Client,
    /// Some backends, which parse it themselves: an entry of
    /// [`Settings::options`].
    Backend,
}

/// One setting: its name in config files and URL options, its environment
/// variable, and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingSpec {
    /// The name in config files and URL options.
    pub name: &'static str,
    /// The environment variable the facade and the CLI read.
    pub env: &'static str,
    /// What it sets, in a line.
    pub about: &'static str,
    /// Who honours it.
    pub scope: SettingScope,
    /// Other spellings some backends' URLs accept for it (`sslrootcert`
    /// for `tls.ca`); config files and the environment take only `name`.
    pub url_aliases: &'static [&'static str],
}

impl SettingSpec {
    /// This setting, also spelled `aliases` in some backends' URLs.
    const fn in_urls_also(self, aliases: &'static [&'static str]) -> SettingSpec {
        SettingSpec {
            url_aliases: aliases,
            ..self
        }
    }
}

const fn client(name: &'static str, env: &'static str, about: &'static str) -> SettingSpec {
    SettingSpec {
        name,
        env,
        about,
        scope: SettingScope::Client,
        url_aliases: &[],
    }
}

const fn backend(name: &'static str, env: &'static str, about: &'static str) -> SettingSpec {
    SettingSpec {
        name,
        env,
        about,
        scope: SettingScope::Backend,
        url_aliases: &[],
    }
}

/// Every setting beyond the URL: parsing, refusal messages, the CLI and the
/// docs all read their names here. Every option of every backend's URL is
/// one of these, so the config file and the environment reach it too.
pub const SETTINGS: &[SettingSpec] = &[
    client(
        "ttl",
        "DISTLOCK_TTL",
        "default lease TTL (ZooKeeper: the session timeout)",
    )
    .in_urls_also(&["session_timeout"]),
    client(
        "connect_timeout",
        "DISTLOCK_CONNECT_TIMEOUT",
        "bound on establishing a connection",
    ),
    client(
        "request_timeout",
        "DISTLOCK_REQUEST_TIMEOUT",
        "bound on each request",
    ),
    client(
        "username",
        "DISTLOCK_USERNAME",
        "user name to authenticate as",
    ),
    client("password", "DISTLOCK_PASSWORD", "password; never shown"),
    client(
        "prefix",
        "DISTLOCK_PREFIX",
        "where the backend's keys or nodes live",
    ),
    client(
        "holder",
        "DISTLOCK_HOLDER",
        "holder description stored with every grant (default host:pid)",
    ),
    backend(
        "layout",
        "DISTLOCK_LAYOUT",
        "whose key layout to use, to share locks with other clients",
    ),
    backend(
        "fsync",
        "DISTLOCK_FSYNC",
        "make record writes durable (file backend)",
    ),
    backend(
        "fair",
        "DISTLOCK_FAIR",
        "queue lock waiters in arrival order (default true; Redis)",
    ),
    backend(
        "tls",
        "DISTLOCK_TLS",
        "connect with TLS (Redis; as rediss://)",
    ),
    backend(
        "tls_insecure",
        "DISTLOCK_TLS_INSECURE",
        "accept any certificate: tests only (Redis built with insecure-tls)",
    ),
    backend(
        "tls.ca",
        "DISTLOCK_TLS_CA",
        "CA certificates to trust (PEM file)",
    )
    .in_urls_also(&["sslrootcert", "ssl_ca"]),
    backend(
        "tls.cert",
        "DISTLOCK_TLS_CERT",
        "client certificate (PEM file)",
    )
    .in_urls_also(&["sslcert"]),
    backend(
        "tls.key",
        "DISTLOCK_TLS_KEY",
        "client certificate's private key (PEM file)",
    )
    .in_urls_also(&["sslkey"]),
    backend(
        "keepalive_interval",
        "DISTLOCK_KEEPALIVE_INTERVAL",
        "interval of the connection's keep-alive pings (etcd)",
    ),
    backend(
        "schema",
        "DISTLOCK_SCHEMA",
        "schema of the lock tables (PostgreSQL)",
    ),
    backend(
        "sslmode",
        "DISTLOCK_SSLMODE",
        "whether to use TLS: disable, prefer, require (PostgreSQL)",
    ),
    backend(
        "table_prefix",
        "DISTLOCK_TABLE_PREFIX",
        "what the lock tables' names start with (MySQL)",
    ),
    backend(
        "pool_size",
        "DISTLOCK_POOL_SIZE",
        "connections for grants, renewals and releases (MySQL)",
    ),
    backend(
        "ssl_mode",
        "DISTLOCK_SSL_MODE",
        "whether to use TLS: disabled, required, verify_ca, verify_identity (MySQL)",
    )
    .in_urls_also(&["ssl-mode"]),
];

/// The setting a URL option names, by its name or one of its aliases.
pub fn setting_of_url_option(option: &str) -> Option<&'static SettingSpec> {
    SETTINGS
        .iter()
        .find(|spec| spec.name == option || spec.url_aliases.contains(&option))
}

/// The names of the settings of `scope`, in table order.
pub fn setting_names(scope: SettingScope) -> impl Iterator<Item = &'static str> {
    SETTINGS
        .iter()
        .filter(move |spec| spec.scope == scope)
        .map(|spec| spec.name)
}

/// Settings that override a backend URL's; `None` keeps the URL's (or the
/// backend's default). The names are those of config files and URL options.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// `ttl`: the default lease TTL (ZooKeeper: the session timeout).
    #[serde(
        with = "serde_humane::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttl: Option<Duration>,
    /// `connect_timeout`: the bound on establishing a connection.
    #[serde(
        with = "serde_humane::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub connect_timeout: Option<Duration>,
    /// `request_timeout`: the bound on each request.
    #[serde(
        with = "serde_humane::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub request_timeout: Option<Duration>,
    /// `username`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// `password`; never shown by `Debug`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// `prefix`: where the backend's keys or nodes live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// `holder`: the holder description stored with every grant, for
    /// operators (default `host:pid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// A backend's own settings ([`SettingScope::Backend`]), name and
    /// value as a URL option writes them (`("tls.ca", "/etc/ca.pem")`).
    /// The backend parses them; one that has no use for a name refuses it.
    #[serde(skip)]
    pub options: Vec<(String, String)>,
}

impl Settings {
    /// Sets the setting `name` from its text, as a URL option or an
    /// environment variable writes it. A backend setting is kept in
    /// [`options`](Self::options) for the backend to parse. An unknown name
    /// or a bad value is `InvalidConfig`, naming the setting.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let duration =
            || parse_duration(value).map_err(|why| Error::invalid_config(format!("{name}: {why}")));
        match name {
            "ttl" => self.ttl = Some(duration()?),
            "connect_timeout" => self.connect_timeout = Some(duration()?),
            "request_timeout" => self.request_timeout = Some(duration()?),
            "username" => self.username = Some(value.to_owned()),
            "password" => self.password = Some(value.to_owned()),
            "prefix" => self.prefix = Some(value.to_owned()),
            "holder" => self.holder = Some(value.to_owned()),
            other if setting_names(SettingScope::Backend).any(|n| n == other) => {
                self.options.retain(|(n, _)| n != other);
                self.options.push((other.to_owned(), value.to_owned()));
            }
            other => {
                return Err(Error::invalid_config(format!(
                    "unknown setting {other:?}; known: {}",
                    SETTINGS
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(())
    }

    /// `self`, with every setting that `over` sets taken from `over`.
    pub fn overlay(self, over: Settings) -> Settings {
        let mut options = self.options;
        options.retain(|(name, _)| over.option(name).is_none());
        options.extend(over.options);
        Settings {
            ttl: over.ttl.or(self.ttl),
            connect_timeout: over.connect_timeout.or(self.connect_timeout),
            request_timeout: over.request_timeout.or(self.request_timeout),
            username: over.username.or(self.username),
            password: over.password.or(self.password),
            prefix: over.prefix.or(self.prefix),
            holder: over.holder.or(self.holder),
            options,
        }
    }

    /// The value of the backend setting `name`, if set.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The names of the settings that are set, in [`SETTINGS`] order.
    pub fn names_set(&self) -> Vec<&'static str> {
        SETTINGS
            .iter()
            .map(|spec| spec.name)
            .filter(|name| self.is_set(name))
            .collect()
    }

    fn is_set(&self, name: &str) -> bool {
        match name {
            "ttl" => self.ttl.is_some(),
            "connect_timeout" => self.connect_timeout.is_some(),
            "request_timeout" => self.request_timeout.is_some(),
            "username" => self.username.is_some(),
            "password" => self.password.is_some(),
            "prefix" => self.prefix.is_some(),
            "holder" => self.holder.is_some(),
            other => self.option(other).is_some(),
        }
    }

    /// `Unsupported` naming the first setting that is set but not among
    /// `honoured`, the settings `backend` has a use for.
    ///
    /// ```
    /// use distlock_core::raw::Settings;
    /// let mut settings = Settings::default();
    /// settings.set("fsync", "true").unwrap();
    /// let err = settings.refuse_others("Redis", &["ttl", "prefix"]).unwrap_err();
    /// assert_eq!(err.kind(), distlock_core::ErrorKind::Unsupported);
    /// assert!(err.message().contains("fsync"));
    /// ```
    pub fn refuse_others(&self, backend: &str, honoured: &[&str]) -> Result<()> {
        match self
            .names_set()
            .into_iter()
            .find(|name| !honoured.contains(name))
        {
            None => Ok(()),
            Some(name) => Err(Error::unsupported(format!(
                "the {backend} backend has no {name} setting; remove it from the config \
                 (it takes: {})",
                honoured.join(", ")
            ))),
        }
    }

    /// [`refuse_others`](Self::refuse_others) for a networked backend: it
    /// honours every [`SettingScope::Client`] setting and its own `options`.
    pub fn refuse_others_than_client(&self, backend: &str, options: &[&str]) -> Result<()> {
        let mut honoured: Vec<&str> = setting_names(SettingScope::Client).collect();
        honoured.extend_from_slice(options);
        self.refuse_others(backend, &honoured)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("prefix", &self.prefix)
            .field("holder", &self.holder)
            .field("options", &self.options)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let settings = Settings {
            password: Some("hunter2".into()),
            ..Settings::default()
        };
        assert!(!format!("{settings:?}").contains("hunter2"));
    }

    #[test]
    fn only_unhonoured_settings_are_refused() {
        let settings = Settings {
            ttl: Some(Duration::from_secs(1)),
            prefix: Some("p".into()),
            ..Settings::default()
        };
        assert_eq!(settings.names_set(), ["ttl", "prefix"]);
        settings.refuse_others("etcd", &["ttl", "prefix"]).unwrap();
        let err = settings.refuse_others("file", &["ttl"]).unwrap_err();
        assert!(err.message().contains("no prefix setting"), "{err}");
    }

    #[test]
    fn set_parses_client_settings_and_keeps_backend_ones_as_text() {
        let mut settings = Settings::default();
        settings.set("ttl", "3s").unwrap();
        settings.set("tls.ca", "/ca.pem").unwrap();
        settings.set("tls.ca", "/other.pem").unwrap();
        assert_eq!(settings.ttl, Some(Duration::from_secs(3)));
        assert_eq!(settings.option("tls.ca"), Some("/other.pem"));
        assert_eq!(settings.names_set(), ["ttl", "tls.ca"]);
        let err = settings.set("ttl", "soon").unwrap_err();
        assert!(err.message().starts_with("ttl:"), "{err}");
        let err = settings.set("tls_ca_file", "/x").unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
        assert!(err.message().contains("tls_ca_file"), "{err}");
    }

    #[test]
    fn every_setting_has_a_distinct_name_and_variable() {
        for (i, spec) in SETTINGS.iter().enumerate() {
            assert!(spec.env.starts_with("DISTLOCK_"), "{spec:?}");
            for other in &SETTINGS[..i] {
                assert!(spec.name != other.name && spec.env != other.env, "{spec:?}");
            }
        }
    }

    #[test]
    fn url_aliases_name_one_setting_each() {
        assert_eq!(setting_of_url_option("sslrootcert").unwrap().name, "tls.ca");
        assert_eq!(setting_of_url_option("tls.ca").unwrap().name, "tls.ca");
        assert!(setting_of_url_option("colour").is_none());
        let spellings: Vec<&str> = SETTINGS
            .iter()
            .flat_map(|spec| std::iter::once(spec.name).chain(spec.url_aliases.iter().copied()))
            .collect();
        for (i, spelling) in spellings.iter().enumerate() {
            assert!(!spellings[..i].contains(spelling), "{spelling} twice");
        }
    }
}
