//! How to reach etcd and how leases behave: [`EtcdConfig`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use distlock_core::raw::{ClientFields, TlsFiles};
use distlock_core::raw::{Settings, serde_humane};
use distlock_core::{ClientConfig, Error, Result};
use serde::{Deserialize, Serialize};

use crate::keys::KeyLayout;

/// Lease TTL used when acquire options leave it unset.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long connecting (and authenticating) may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take, retries on another endpoint included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keepalive ping interval when none is given: a connection that
/// went silent (a frozen member, a dropped route) is dropped after about
/// twice this, and its watches re-read.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Key prefix when none is given.
pub const DEFAULT_PREFIX: &str = "/distlock";
/// The settings etcd takes beyond the client settings.
const OPTIONS: &[&str] = &[
    "layout",
    "tls.ca",
    "tls.cert",
    "tls.key",
    "keepalive_interval",
];

/// Configuration of an [`EtcdBackend`](crate::EtcdBackend).
///
/// Build it with [`EtcdConfig::new`] and the `with_*` methods, parse it from
/// a URL with [`EtcdConfig::from_url`], or deserialize it (with the names
/// of the URL options: `ttl`, `connect_timeout`, `request_timeout`,
/// `keepalive_interval`, durations such as `"10s"` or `"500ms"`, a bare
/// number being seconds).
///
/// TLS is used when [`tls`](Self::tls) is set (the `etcds://` scheme sets
/// it) or any of the [`tls_files`](Self::tls_files) is given. `tls.ca` is
/// then required: the server certificate is verified against it, not
/// against system roots. `tls.cert` and `tls.key` (PEM) enable
/// client-certificate authentication and must be given together.
///
/// `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// Cluster members, `host:port` or `http(s)://host:port`. Requests go to
    /// any of them; idempotent ones are retried on another when one fails.
    pub endpoints: Vec<String>,
    /// Every key this backend writes starts with this prefix (in the
    /// `distlock` layout; the `concurrency` layout has none).
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// How names map to keys: [`KeyLayout::Distlock`] (the default) or
    /// [`KeyLayout::Concurrency`], to share locks and elections with etcd's
    /// Go `concurrency` package and `etcdctl lock` / `etcdctl elect`.
    #[serde(default, skip_serializing_if = "KeyLayout::is_default")]
    pub layout: KeyLayout,
    /// Lease TTL used when acquire options leave it unset (rounded up to
    /// whole seconds, as etcd leases are).
    #[serde(rename = "ttl", with = "serde_humane", default = "default_ttl")]
    pub default_ttl: Duration,
    /// Bound on connecting and authenticating in [`EtcdBackend::connect`](crate::EtcdBackend::connect).
    #[serde(with = "serde_humane", default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// Bound on every request, its retries included. No call waits longer
    /// than this (plus the acquire wait, for acquisitions).
    #[serde(with = "serde_humane", default = "default_request_timeout")]
    pub request_timeout: Duration,
    /// etcd user name (etcd's auth must be enabled on the server).
    #[serde(default)]
    pub username: Option<String>,
    /// etcd password; never printed by `Debug`.
    #[serde(default)]
    pub password: Option<String>,
    /// Connect with TLS (`https`). Implied by the certificate paths.
    #[serde(default)]
    pub tls: bool,
    /// The CA that signed the server certificate (required with TLS) and
    /// the client certificate and key, for client-certificate
    /// authentication. Any of them turns TLS on.
    #[serde(default, skip_serializing_if = "TlsFiles::is_empty")]
    pub tls_files: TlsFiles,
    /// HTTP/2 keepalive ping interval while streams (watches, keepalives)
    /// are open; a dead connection is noticed after about twice this.
    /// `None` means [`DEFAULT_KEEPALIVE_INTERVAL`]. etcd refuses pings more
    /// often than its `--grpc-keepalive-min-time` (5 s by default).
    #[serde(with = "serde_humane::optional", default)]
    pub keepalive_interval: Option<Duration>,
    /// Who this backend's locks are held by, as operators see it in
    /// `inspect`: stored with every lock this backend takes, unless the
    /// acquire sets its own. `None` means `host:pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

fn default_prefix() -> String {
    DEFAULT_PREFIX.to_owned()
}

fn default_ttl() -> Duration {
    DEFAULT_TTL
}

fn default_connect_timeout() -> Duration {
    DEFAULT_CONNECT_TIMEOUT
}

fn default_request_timeout() -> Duration {
    DEFAULT_REQUEST_TIMEOUT
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("default_ttl", &self.default_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.uses_tls())
            .field("tls_files", &self.tls_files)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("holder", &self.holder)
            .finish()
    }
}

impl ClientConfig for EtcdConfig {
    fn client_fields(&mut self) -> ClientFields<'_> {
        ClientFields {
            prefix: &mut self.prefix,
            connect_timeout: &mut self.connect_timeout,
            request_timeout: &mut self.request_timeout,
            username: &mut self.username,
            password: &mut self.password,
            holder: &mut self.holder,
        }
    }
}

impl EtcdConfig {
    /// A configuration for these endpoints with every default: prefix
    /// [`DEFAULT_PREFIX`], TTL [`DEFAULT_TTL`], no auth, no TLS.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: default_prefix(),
            layout: KeyLayout::default(),
            default_ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            username: None,
            password: None,
            tls: false,
            tls_files: TlsFiles::default(),
            keepalive_interval: None,
            holder: None,
        }
    }

    /// Parses `etcd://[user:password@]h1:2379,h2:2379[/prefix][?options]`
    /// (or `etcds://` for TLS). See the crate docs for the options.
    pub fn from_url(url: &str) -> Result<Self> {
        crate::url::parse(url)
    }

    /// Sets the key layout.
    pub fn with_layout(mut self, layout: KeyLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets the default lease TTL. etcd leases are whole seconds: a TTL
    /// below etcd's minimum of a second fails [`validate`](Self::validate),
    /// and others are rounded up when a lease is granted.
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Applies the [`Settings`] etcd honours over these (all but `fsync`):
    /// the client settings, `layout` and the TLS files `tls.ca`,
    /// `tls.cert` and `tls.key`, parsed as the URL options of those names.
    pub fn with_settings(mut self, settings: &Settings) -> Result<Self> {
        settings.refuse_others_than_client("etcd", OPTIONS)?;
        self.apply_client_settings(settings);
        self.default_ttl = settings.ttl.unwrap_or(self.default_ttl);
        for (name, value) in &settings.options {
            crate::url::apply_option(&mut self, name, value)
                .map_err(|why| Error::invalid_config(format!("etcd {why}")))?;
        }
        self.validate()?;
        Ok(self)
    }

    /// Turns TLS on with this CA certificate (PEM).
    pub fn with_tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls = true;
        self.tls_files.ca = Some(path.into());
        self
    }

    /// Sets a client certificate and key (PEM) and turns TLS on.
    pub fn with_client_identity(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls = true;
        self.tls_files.cert = Some(cert.into());
        self.tls_files.key = Some(key.into());
        self
    }

    /// Sets the HTTP/2 keepalive ping interval.
    pub fn with_keepalive_interval(mut self, interval: Duration) -> Self {
        self.keepalive_interval = Some(interval);
        self
    }

    /// Whether connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls || !self.tls_files.is_empty()
    }

    /// The endpoints as one string, for messages.
    pub(crate) fn endpoint_list(&self) -> String {
        self.endpoints.join(",")
    }

    /// Checks what can be checked without I/O: endpoints, timeouts, TTL,
    /// credentials and TLS settings that come in pairs, and that the
    /// `concurrency` layout is not given a key prefix it would ignore.
    pub fn validate(&self) -> Result<()> {
        if self.layout == KeyLayout::Concurrency
            && self.prefix.trim_end_matches('/') != DEFAULT_PREFIX
        {
            return Err(Error::invalid_config(format!(
                "etcd key prefix {:?} does not apply to layout=concurrency: there a name is the \
                 raw key prefix, as in etcd's concurrency package; remove the prefix, or use \
                 layout=distlock",
                self.prefix
            )));
        }
        if self.endpoints.is_empty() {
            return Err(Error::invalid_config(
                "etcd config has no endpoints; give at least one host:port",
            ));
        }
        for endpoint in &self.endpoints {
            crate::url::check_endpoint(endpoint)?;
        }
        distlock_core::raw::ttl_for(self.default_ttl, &crate::backend::EtcdBackend::caps())
            .map_err(|e| Error::invalid_config(format!("etcd ttl: {}", e.message())))?;
        for (what, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid_config(format!(
                    "etcd {what} must be greater than zero: no call may wait forever"
                )));
            }
        }
        if self.holder.as_deref().is_some_and(str::is_empty) {
            return Err(Error::invalid_config(
                "etcd holder is empty; give a label such as \"billing-worker-3\", or leave it \
                 out for host:pid",
            ));
        }
        if self.keepalive_interval.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid_config(
                "etcd keepalive_interval must be greater than zero (or unset)",
            ));
        }
        match (&self.username, &self.password) {
            (Some(user), Some(_)) if user.is_empty() => {
                return Err(Error::invalid_config("etcd username is empty"));
            }
            (Some(_), None) => {
                return Err(Error::invalid_config(
                    "etcd username given without a password",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::invalid_config(
                    "etcd password given without a username",
                ));
            }
            _ => {}
        }
        self.tls_files.check("etcd")?;
        if self.uses_tls() && self.tls_files.ca.is_none() {
            return Err(Error::invalid_config(
                "etcd TLS needs tls.ca: the PEM file of the CA that signed the server certificate",
            ));
        }
        if self.uses_tls() && !cfg!(feature = "tls") {
            return Err(Error::unsupported(
                "etcd TLS was asked for, but distlock-etcd was built without its `tls` feature",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn debug_redacts_the_password() {
        let config = EtcdConfig::new(["127.0.0.1:2379"]).with_credentials("root", "hunter2");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn serde_uses_the_shared_names_and_defaults() {
        let config: EtcdConfig = serde_json::from_str(
            r#"{"endpoints":["a:2379"],"request_timeout":"250ms","connect_timeout":3}"#,
        )
        .unwrap();
        assert_eq!(config.request_timeout, Duration::from_millis(250));
        assert_eq!(config.connect_timeout, Duration::from_secs(3));
        assert_eq!(config.default_ttl, DEFAULT_TTL);
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains(r#""ttl":"10s""#), "{json}");
        let back: EtcdConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config);
    }

    #[test]
    fn toml_round_trip_leaves_unset_options_out() {
        let config = EtcdConfig::new(["a:2379", "b:2379"]).with_prefix("/app");
        let text = toml::to_string(&config).unwrap();
        assert!(!text.contains("password"), "{text}");
        let back: EtcdConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
        let minimal: EtcdConfig = toml::from_str(r#"endpoints = ["h:2379"]"#).unwrap();
        assert_eq!(minimal.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    }

    #[test]
    fn unpaired_or_missing_settings_are_invalid_config() {
        let base = EtcdConfig::new(["a:2379"]);
        let mut no_password = base.clone();
        no_password.username = Some("root".into());
        let mut half_identity = base.clone();
        half_identity.tls_files.cert = Some("c.pem".into());
        let mut tls_without_ca = base.clone();
        tls_without_ca.tls = true;
        let cases = [
            EtcdConfig::new(Vec::<String>::new()),
            base.clone().with_request_timeout(Duration::ZERO),
            base.clone().with_connect_timeout(Duration::ZERO),
            no_password,
            half_identity,
            tls_without_ca,
        ];
        for config in cases {
            let err = config.validate().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{config:?}: {err}");
        }
        let err = base
            .with_default_ttl(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn the_holder_setting_is_honoured_and_must_not_be_empty() {
        let settings = Settings {
            holder: Some("billing-worker-3".into()),
            ..Settings::default()
        };
        let config = EtcdConfig::new(["a:2379"])
            .with_settings(&settings)
            .unwrap();
        assert_eq!(config.holder.as_deref(), Some("billing-worker-3"));
        let text = toml::to_string(&config).unwrap();
        assert!(text.contains(r#"holder = "billing-worker-3""#), "{text}");
        assert!(
            !toml::to_string(&EtcdConfig::new(["a:2379"]))
                .unwrap()
                .contains("holder")
        );
        let err = EtcdConfig::new(["a:2379"])
            .with_holder("")
            .validate()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("holder"), "{err}");
    }

    #[test]
    fn the_concurrency_layout_refuses_a_key_prefix() {
        let base = EtcdConfig::new(["a:2379"]).with_layout(KeyLayout::Concurrency);
        base.validate().expect("the default prefix is no prefix");
        let err = base.with_prefix("/app").validate().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.message().contains("\"/app\"") && err.message().contains("layout=concurrency"),
            "{err}"
        );
        EtcdConfig::new(["a:2379"])
            .with_prefix("/app")
            .validate()
            .expect("the distlock layout takes any prefix");
    }

    #[test]
    fn the_layout_is_left_out_when_default_and_parsed_by_name() {
        let default = EtcdConfig::new(["a:2379"]);
        assert!(!toml::to_string(&default).unwrap().contains("layout"));
        let text = toml::to_string(&default.clone().with_layout(KeyLayout::Concurrency)).unwrap();
        assert!(text.contains(r#"layout = "concurrency""#), "{text}");
        let back: EtcdConfig = toml::from_str(&text).unwrap();
        assert_eq!(back.layout, KeyLayout::Concurrency);
        let err = toml::from_str::<EtcdConfig>("endpoints = [\"a:2379\"]\nlayout = \"curator\"")
            .unwrap_err();
        assert!(err.to_string().contains("concurrency"), "{err}");
    }
}
