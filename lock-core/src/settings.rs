//! [`Settings`]: what a user configures beyond the URL, in one vocabulary
//! for every backend.
//!
//! A config file, the environment or command-line flags fill one
//! `Settings`; each backend applies the settings it honours over its URL's
//! and refuses the rest, so a setting never silently does nothing.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Result};

/// Settings that override a backend URL's; `None` keeps the URL's (or the
/// backend's default). The names are those of config files and URL options.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `ttl`: the default lease TTL (ZooKeeper: the session timeout).
    pub ttl: Option<Duration>,
    /// `connect_timeout`: the bound on establishing a connection.
    pub connect_timeout: Option<Duration>,
    /// `request_timeout`: the bound on each request.
    pub request_timeout: Option<Duration>,
    /// `username`.
    pub username: Option<String>,
    /// `password`; never shown by `Debug`.
    pub password: Option<String>,
    /// `prefix`: where the backend's keys or nodes live.
    pub prefix: Option<String>,
    /// `layout`: whose key layout to use, to share locks with other clients.
    pub layout: Option<String>,
    /// `holder`: the holder description stored with every grant, for
    /// operators (default `host:pid`).
    pub holder: Option<String>,
    /// `fsync`: make record writes durable (file backend).
    pub fsync: Option<bool>,
    /// `tls.ca`: CA certificates to trust (PEM).
    pub tls_ca: Option<PathBuf>,
    /// `tls.cert`: the client certificate (PEM).
    pub tls_cert: Option<PathBuf>,
    /// `tls.key`: the client certificate's private key (PEM).
    pub tls_key: Option<PathBuf>,
}

impl Settings {
    /// The names of the settings that are set.
    pub fn names_set(&self) -> Vec<&'static str> {
        [
            ("ttl", self.ttl.is_some()),
            ("connect_timeout", self.connect_timeout.is_some()),
            ("request_timeout", self.request_timeout.is_some()),
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
            ("prefix", self.prefix.is_some()),
            ("layout", self.layout.is_some()),
            ("holder", self.holder.is_some()),
            ("fsync", self.fsync.is_some()),
            ("tls.ca", self.tls_ca.is_some()),
            ("tls.cert", self.tls_cert.is_some()),
            ("tls.key", self.tls_key.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }

    /// `Unsupported` naming the first setting that is set but not among
    /// `honoured`, the settings `backend` has a use for.
    ///
    /// ```
    /// use lock_core::raw::Settings;
    /// let settings = Settings { fsync: Some(true), ..Settings::default() };
    /// let err = settings.refuse_others("Redis", &["ttl", "prefix"]).unwrap_err();
    /// assert_eq!(err.kind(), lock_core::ErrorKind::Unsupported);
    /// assert!(err.message().contains("fsync"));
    /// ```
    pub fn refuse_others(&self, backend: &str, honoured: &[&str]) -> Result<()> {
        self.refuse_others_in(backend, &[honoured])
    }

    /// [`refuse_others`](Self::refuse_others) for a networked backend: it
    /// honours [`CLIENT_SETTINGS`](crate::raw::CLIENT_SETTINGS) and `extra`.
    pub fn refuse_others_than_client(&self, backend: &str, extra: &[&str]) -> Result<()> {
        self.refuse_others_in(backend, &[&crate::raw::CLIENT_SETTINGS, extra])
    }

    fn refuse_others_in(&self, backend: &str, groups: &[&[&str]]) -> Result<()> {
        let honoured = groups.concat();
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
            .field("layout", &self.layout)
            .field("holder", &self.holder)
            .field("fsync", &self.fsync)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
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
}
