//! How to reach PostgreSQL and how to lay out the locks there.
//!
//! Built in code ([`PostgresConfig::new`] and the `with_` builders) or
//! from a URL ([`PostgresConfig::from_url`]):
//!
//! ```text
//! postgres://user:password@host:port/database?ttl=10s&connect_timeout=5s
//!     &request_timeout=5s&prefix=app/&holder=worker-1&schema=distlock&sslmode=disable
//! ```
//!
//! `postgresql://` is the same. The password never appears in errors, logs
//! or `Debug` output.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use distlock_core::raw::{ClientFields, TlsFiles};
use distlock_core::raw::{Settings, UrlParts, parse_duration, redact_url, split_host_port};
use distlock_core::{ClientConfig, Error, Result};

/// The port PostgreSQL listens on by default.
pub const DEFAULT_PORT: u16 = 5432;
/// The schema the lock tables live in by default.
pub const DEFAULT_SCHEMA: &str = "distlock";
/// The default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// The shortest lease TTL: renewal runs every TTL/3, and each renewal is one
/// round trip plus the server's commit, which must fit well within it.
pub const MIN_TTL: Duration = Duration::from_millis(300);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections per backend for grants, renewals and releases (the listening
/// connection comes on top). Requests are pipelined on them, so a few serve
/// any number of held locks.
const DEFAULT_POOL_SIZE: usize = 2;
/// A schema name becomes part of the notification channel's name, which
/// PostgreSQL limits to 63 bytes.
const MAX_SCHEMA_LEN: usize = 40;
/// The options a URL understands, for the unknown-option error.
const OPTIONS: &str = "ttl, connect_timeout, request_timeout, prefix, holder, schema, sslmode, \
                       tls.ca, tls.cert, tls.key, layout";
/// The settings PostgreSQL takes beyond the client settings.
const SETTINGS: &[&str] = &[
    "layout", "tls.ca", "tls.cert", "tls.key", "schema", "sslmode",
];
/// The user to log in as when none is given.
const DEFAULT_USER: &str = "postgres";

/// Whether to use TLS, as libpq's `sslmode`, except that whenever TLS is
/// used the server's certificate is verified (chain and host name) against
/// `sslrootcert`, or the system's roots when that is unset: a connection
/// is never encrypted to an unverified peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Plain text.
    Disable,
    /// TLS if the server offers it, plain text if it refuses TLS (not if
    /// its certificate fails verification: that is an error).
    Prefer,
    /// TLS or no connection (`require`, `verify-ca` and `verify-full`).
    Require,
}

/// How locks are kept: in the lock tables, or as the server's session
/// advisory locks (shared with any client that takes the same keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// Rows in the `entries` table: every feature, works behind a
    /// transaction-mode pooler.
    Table,
    /// `pg_advisory_lock` on a connection per held lock: plain locks only,
    /// interoperable with other clients of the same keys.
    Advisory,
}

impl Layout {
    fn parse(value: &str) -> std::result::Result<Self, String> {
        match value {
            "table" => Ok(Layout::Table),
            "advisory" => Ok(Layout::Advisory),
            other => Err(format!("layout {other:?} is not table or advisory")),
        }
    }
}

/// How to reach PostgreSQL and where to keep the locks.
#[derive(Clone)]
pub struct PostgresConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) database: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) schema: String,
    pub(crate) prefix: String,
    pub(crate) holder: Option<String>,
    pub(crate) ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) pool_size: usize,
    /// As written; `None`: not written (see [`PostgresConfig::sslmode`]).
    pub(crate) sslmode: Option<SslMode>,
    /// `tls.ca`, `tls.cert`, `tls.key` (libpq's `sslrootcert`, `sslcert`,
    /// `sslkey` in the URL).
    pub(crate) tls: TlsFiles,
    pub(crate) layout: Layout,
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("schema", &self.schema)
            .field("prefix", &self.prefix)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("pool_size", &self.pool_size)
            .field("sslmode", &self.sslmode())
            .field("tls", &self.tls)
            .field("layout", &self.layout)
            .finish()
    }
}

impl ClientConfig for PostgresConfig {
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

impl PostgresConfig {
    /// Where the server is, without credentials: `host:port/database`
    /// (the host in brackets when it is an IPv6 address).
    pub fn address(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{host}:{}/{}", self.port, self.database)
    }

    /// Database `postgres` on `host:port` as user `postgres`, the default
    /// schema, TTL and timeouts.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        PostgresConfig {
            host: host.into(),
            port,
            database: "postgres".into(),
            username: None,
            password: None,
            schema: DEFAULT_SCHEMA.into(),
            prefix: String::new(),
            holder: None,
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            sslmode: None,
            tls: TlsFiles::default(),
            layout: Layout::Table,
        }
    }

    /// Parses a `postgres://` or `postgresql://` URL (see the module docs).
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = redact_url(url);
        let bad = |what: String| Error::invalid_config(format!("postgres URL {shown}: {what}"));
        let parts = UrlParts::parse(url)
            .map_err(|why| bad(format!("{why}; expected postgres://user@host:port/db")))?;
        if !matches!(parts.scheme.as_str(), "postgres" | "postgresql") {
            return Err(bad(format!(
                "unsupported scheme {:?}; expected postgres or postgresql",
                parts.scheme
            )));
        }
        if parts.fragment.is_some() {
            return Err(bad("a fragment (#...) means nothing here".into()));
        }
        let [host] = parts.hosts.as_slice() else {
            return Err(bad(format!(
                "expected exactly one host, got {}",
                parts.hosts.len()
            )));
        };
        let (host, port) = split_host_port(host).map_err(&bad)?;
        let mut config = PostgresConfig::new(host, port.unwrap_or(DEFAULT_PORT));
        match parts.path.trim_start_matches('/') {
            "" => {}
            db if db.contains('/') => {
                return Err(bad(format!("database name {db:?} must not contain '/'")));
            }
            db => config.database = db.to_owned(),
        }
        if let Some(user) = parts.username.filter(|u| !u.is_empty()) {
            config.username = Some(user);
        }
        config.password = parts.password;
        for (key, value) in parts.query {
            config.apply_option(&key, value).map_err(&bad)?;
        }
        config.check()?;
        Ok(config)
    }

    /// Applies the URL option or backend setting `key`; the TLS files are
    /// `tls.ca`, `tls.cert` and `tls.key`, or libpq's `sslrootcert`,
    /// `sslcert` and `sslkey`.
    fn apply_option(&mut self, key: &str, value: String) -> std::result::Result<(), String> {
        let duration = |v: &str| parse_duration(v).map_err(|why| format!("option {key}: {why}"));
        match key {
            "ttl" => self.ttl = duration(&value)?,
            "connect_timeout" => self.connect_timeout = duration(&value)?,
            "request_timeout" => self.request_timeout = duration(&value)?,
            "prefix" => self.prefix = value,
            "holder" => self.holder = Some(value),
            "schema" => self.schema = value,
            "sslmode" => self.sslmode = Some(parse_sslmode(&value)?),
            "sslrootcert" => self.tls.ca = Some(PathBuf::from(value)),
            "sslcert" => self.tls.cert = Some(PathBuf::from(value)),
            "sslkey" => self.tls.key = Some(PathBuf::from(value)),
            name if self.tls.set(name, &value) => {}
            "layout" => self.layout = Layout::parse(&value)?,
            other => return Err(format!("unknown option {other:?}; known: {OPTIONS}")),
        }
        Ok(())
    }

    /// Applies `settings` over this config: the client settings, `layout`
    /// and the TLS files `tls.ca`, `tls.cert`, `tls.key`. A setting
    /// PostgreSQL has no use for is `Unsupported`, naming it.
    pub fn with_settings(mut self, settings: &Settings) -> Result<Self> {
        settings.refuse_others_than_client("postgres", SETTINGS)?;
        self.apply_client_settings(settings);
        if let Some(ttl) = settings.ttl {
            self.ttl = ttl;
        }
        for (name, value) in &settings.options {
            self.apply_option(name, value.clone())
                .map_err(|why| Error::invalid_config(format!("postgres {why}")))?;
        }
        self.check()?;
        Ok(self)
    }

    /// Sets the database to connect to.
    pub fn with_database(mut self, database: impl Into<String>) -> Self {
        self.database = database.into();
        self
    }

    /// Sets the schema of the lock tables (lower-case letters, digits and
    /// `_`, at most 40 bytes; checked on connect).
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the default lease TTL (at least [`MIN_TTL`]).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how locks are kept.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets whether to use TLS.
    pub fn with_sslmode(mut self, mode: SslMode) -> Self {
        self.sslmode = Some(mode);
        self
    }

    /// Whether to use TLS: the mode written, or else [`SslMode::Require`]
    /// when a TLS file is given (a CA to trust, a client certificate) and
    /// [`SslMode::Prefer`] when none is. Asking for TLS never falls back
    /// to plain text unless `prefer` is written.
    pub(crate) fn sslmode(&self) -> SslMode {
        match self.sslmode {
            Some(mode) => mode,
            None if self.tls.ca.is_some() || self.tls.cert.is_some() => SslMode::Require,
            None => SslMode::Prefer,
        }
    }

    /// Trusts the CA certificates of this PEM file (instead of the system's
    /// roots) when verifying the server.
    pub fn with_tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this client certificate and its private key (PEM) when the
    /// connection uses TLS, for servers that authenticate clients by
    /// certificate (`hostssl ... cert` in `pg_hba.conf`).
    pub fn with_client_identity(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls.cert = Some(cert.into());
        self.tls.key = Some(key.into());
        self
    }

    /// The user to log in as.
    pub(crate) fn user(&self) -> &str {
        self.username.as_deref().unwrap_or(DEFAULT_USER)
    }

    /// Sets how many connections serve requests (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// The default lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The schema of the lock tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Checks what can be checked before connecting.
    pub(crate) fn check(&self) -> Result<()> {
        check_schema(&self.schema)?;
        self.tls.check("postgres")?;
        if self.sslmode == Some(SslMode::Disable) && !self.tls.is_empty() {
            return Err(Error::invalid_config(
                "postgres sslmode=disable contradicts the TLS files given (tls.ca, tls.cert, tls.key): remove one or the other",
            ));
        }
        check_ttl(self.ttl)?;
        for (what, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid_config(format!(
                    "postgres {what} must be more than zero"
                )));
            }
        }
        Ok(())
    }
}

/// `InvalidConfig` for a TTL that is zero or below [`MIN_TTL`].
pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    distlock_core::check_ttl(ttl)?;
    if ttl < MIN_TTL {
        return Err(Error::invalid_config(format!(
            "a postgres lease TTL must be at least {}, got {}",
            distlock_core::raw::human_duration(MIN_TTL),
            distlock_core::raw::human_duration(ttl)
        )));
    }
    Ok(())
}

fn check_schema(schema: &str) -> Result<()> {
    let well_formed = !schema.is_empty()
        && schema.len() <= MAX_SCHEMA_LEN
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && !schema.starts_with("pg_");
    if well_formed {
        Ok(())
    } else {
        Err(Error::invalid_config(format!(
            "postgres schema {schema:?}: use lower-case letters, digits and _, at most \
             {MAX_SCHEMA_LEN} bytes, not starting with a digit or pg_"
        )))
    }
}

fn parse_sslmode(value: &str) -> std::result::Result<SslMode, String> {
    match value {
        "disable" => Ok(SslMode::Disable),
        "allow" | "prefer" => Ok(SslMode::Prefer),
        "require" | "verify-ca" | "verify-full" => Ok(SslMode::Require),
        other => Err(format!(
            "sslmode={other:?} is not one of disable, allow, prefer, require, verify-ca, \
             verify-full"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn a_full_url_parses() {
        let config = PostgresConfig::from_url(
            "postgresql://app:s%40cret@db.example:6543/locks?ttl=5s&connect_timeout=2s\
             &request_timeout=3s&prefix=jobs/&holder=w1&schema=app_locks&sslmode=disable",
        )
        .unwrap();
        assert_eq!(config.host, "db.example");
        assert_eq!(config.port, 6543);
        assert_eq!(config.database, "locks");
        assert_eq!(config.user(), "app");
        assert_eq!(config.password.as_deref(), Some("s@cret"));
        assert_eq!(config.ttl, Duration::from_secs(5));
        assert_eq!(config.connect_timeout, Duration::from_secs(2));
        assert_eq!(config.request_timeout, Duration::from_secs(3));
        assert_eq!(config.prefix, "jobs/");
        assert_eq!(config.holder.as_deref(), Some("w1"));
        assert_eq!(config.schema, "app_locks");
        assert_eq!(config.sslmode(), SslMode::Disable);
    }

    #[test]
    fn a_tls_file_requires_tls_unless_prefer_is_written_and_refuses_disable() {
        let mode = |url: &str| PostgresConfig::from_url(url).unwrap().sslmode();
        assert_eq!(mode("postgres://h"), SslMode::Prefer);
        assert_eq!(mode("postgres://h?tls.ca=/ca.pem"), SslMode::Require);
        assert_eq!(mode("postgres://h?sslrootcert=/ca.pem"), SslMode::Require);
        assert_eq!(
            mode("postgres://h?tls.cert=/c.pem&tls.key=/k.pem"),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://h?tls.ca=/ca.pem&sslmode=prefer"),
            SslMode::Prefer
        );
        let err =
            PostgresConfig::from_url("postgres://h?sslmode=disable&tls.ca=/ca.pem").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains("sslmode=disable"), "{err}");
    }

    #[test]
    fn defaults_fill_a_short_url() {
        let config = PostgresConfig::from_url("postgres://localhost").unwrap();
        assert_eq!(
            (config.port, config.database.as_str(), config.user()),
            (DEFAULT_PORT, "postgres", "postgres")
        );
        assert_eq!(config.schema, DEFAULT_SCHEMA);
    }

    #[test]
    fn the_password_never_shows() {
        let config = PostgresConfig::from_url("postgres://u:hunter2@h/db").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
        let err = PostgresConfig::from_url("postgres://u:hunter2@h/db?bogus=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn bad_input_is_a_typed_error_naming_it() {
        for (url, names) in [
            ("redis://h", "scheme"),
            ("postgres://h?ttl=0s", "TTL"),
            ("postgres://h?ttl=10ms", "at least"),
            ("postgres://h?schema=Bad-Name", "schema"),
            ("postgres://h?sslmode=sometimes", "sslmode"),
            ("postgres://a,b/db", "one host"),
            ("postgres://h?connect_timeout=soon", "connect_timeout"),
        ] {
            let err = PostgresConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
            assert!(err.to_string().contains(names), "{url}: {err}");
        }
    }

    #[test]
    fn settings_apply_and_unknown_ones_are_refused() {
        let settings = Settings {
            ttl: Some(Duration::from_secs(2)),
            prefix: Some("p/".into()),
            ..Settings::default()
        };
        let config = PostgresConfig::new("h", 1)
            .with_settings(&settings)
            .unwrap();
        assert_eq!(
            (config.ttl, config.prefix.as_str()),
            (Duration::from_secs(2), "p/")
        );
        let fsync = Settings {
            options: vec![("fsync".into(), "true".into())],
            ..Settings::default()
        };
        let err = PostgresConfig::new("h", 1)
            .with_settings(&fsync)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("fsync"), "{err}");
    }

    #[test]
    fn tls_files_have_the_shared_names_and_come_in_pairs() {
        let config =
            PostgresConfig::from_url("postgres://h?tls.ca=/ca.pem&tls.cert=/c.pem&tls.key=/k.pem")
                .unwrap();
        assert_eq!(
            config.tls.ca.as_deref(),
            Some(std::path::Path::new("/ca.pem"))
        );
        assert_eq!(
            config.tls.key.as_deref(),
            Some(std::path::Path::new("/k.pem"))
        );
        let libpq = PostgresConfig::from_url("postgres://h?sslrootcert=/ca.pem").unwrap();
        assert_eq!(libpq.tls.ca, config.tls.ca);
        let half = Settings {
            options: vec![("tls.cert".into(), "/c.pem".into())],
            ..Settings::default()
        };
        let err = PostgresConfig::new("h", 1)
            .with_settings(&half)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("tls.key"), "{err}");
    }
}
