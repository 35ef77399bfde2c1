//! How to reach MySQL or MariaDB and how to lay out the locks there.
//!
//! Built in code ([`MysqlConfig::new`] and the `with_` builders) or from a
//! URL ([`MysqlConfig::from_url`]):
//!
//! ```text
//! mysql://user:password@host:port/database?ttl=10s&connect_timeout=5s
//!     &request_timeout=5s&prefix=app/&holder=worker-1&table_prefix=distlock_
//!     &layout=table&ssl_mode=disabled
//! ```
//!
//! `mariadb://` is the same. The password never appears in errors, logs or
//! `Debug` output.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use distlock_core::raw::{ClientFields, TlsFiles};
use distlock_core::raw::{Settings, UrlParts, parse_duration, redact_url, split_host_port};
use distlock_core::{ClientConfig, Error, Result};

/// The port MySQL and MariaDB listen on by default.
pub const DEFAULT_PORT: u16 = 3306;
/// What the lock tables' names start with by default.
pub const DEFAULT_TABLE_PREFIX: &str = "distlock_";
/// The default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// The shortest lease TTL: renewal runs every TTL/3, and each renewal is one
/// round trip plus the server's commit, which must fit well within it.
pub const MIN_TTL: Duration = Duration::from_millis(300);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections per backend for grants, renewals and releases. Each request
/// is a transaction that has its connection to itself.
const DEFAULT_POOL_SIZE: usize = 4;
/// Table names are at most 64 characters; the longest suffix is 11.
const MAX_TABLE_PREFIX_LEN: usize = 48;
/// The options a URL understands, for the unknown-option error.
const OPTIONS: &str = "ttl, connect_timeout, request_timeout, prefix, holder, table_prefix, \
                       layout, pool_size, ssl_mode, tls.ca";
/// The settings MySQL takes beyond the client settings.
const SETTINGS: &[&str] = &["layout", "table_prefix", "pool_size", "ssl_mode", "tls.ca"];
/// The user to log in as when none is given.
const DEFAULT_USER: &str = "root";

/// Whether to use TLS. Whenever TLS is used the server's certificate is
/// verified (chain and host name) against `tls.ca`, or the bundled web
/// roots when that is unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Plain text (`disabled`).
    Disabled,
    /// TLS or no connection (`required`, `verify_ca`, `verify_identity`).
    Required,
}

/// How locks are kept: in the lock tables, or as the server's named locks
/// (shared with any client that takes the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// Rows in an InnoDB table: FIFO, strong tokens, every primitive.
    Table,
    /// `GET_LOCK` on a connection per held lock: plain locks only,
    /// interoperable with other clients of the same names.
    Named,
}

impl Layout {
    fn parse(value: &str) -> std::result::Result<Self, String> {
        match value {
            "table" => Ok(Layout::Table),
            "named" => Ok(Layout::Named),
            other => Err(format!("layout {other:?} is not table or named")),
        }
    }
}

/// How to reach MySQL or MariaDB and where to keep the locks.
#[derive(Clone)]
pub struct MysqlConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) database: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) table_prefix: String,
    pub(crate) prefix: String,
    pub(crate) holder: Option<String>,
    pub(crate) ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) pool_size: usize,
    /// As written; `None`: not written (see [`MysqlConfig::ssl_mode`]).
    pub(crate) ssl_mode: Option<SslMode>,
    /// Only `ca` is supported: [`check`](Self::check) refuses the client
    /// certificate files.
    pub(crate) tls: TlsFiles,
    pub(crate) layout: Layout,
}

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("table_prefix", &self.table_prefix)
            .field("prefix", &self.prefix)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("pool_size", &self.pool_size)
            .field("ssl_mode", &self.ssl_mode())
            .field("tls", &self.tls)
            .field("layout", &self.layout)
            .finish()
    }
}

impl ClientConfig for MysqlConfig {
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

impl MysqlConfig {
    /// Where the server is, without credentials: `host:port/database`
    /// (the host in brackets when it is an IPv6 address; no database when
    /// none is set).
    pub fn address(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{host}:{}/{}",
            self.port,
            self.database.as_deref().unwrap_or("")
        )
    }

    /// `host:port` as user `root`, no database (the table layout needs
    /// one), the default table prefix, TTL and timeouts, plain text.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        MysqlConfig {
            host: host.into(),
            port,
            database: None,
            username: None,
            password: None,
            table_prefix: DEFAULT_TABLE_PREFIX.into(),
            prefix: String::new(),
            holder: None,
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            ssl_mode: None,
            tls: TlsFiles::default(),
            layout: Layout::Table,
        }
    }

    /// Parses a `mysql://` or `mariadb://` URL (see the module docs).
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = redact_url(url);
        let bad = |what: String| Error::invalid_config(format!("mysql URL {shown}: {what}"));
        let parts = UrlParts::parse(url)
            .map_err(|why| bad(format!("{why}; expected mysql://user:pass@host:port/db")))?;
        if !matches!(parts.scheme.as_str(), "mysql" | "mariadb") {
            return Err(bad(format!(
                "unsupported scheme {:?}; expected mysql or mariadb",
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
        let mut config = MysqlConfig::new(host, port.unwrap_or(DEFAULT_PORT));
        match parts.path.trim_start_matches('/') {
            "" => {}
            db if db.contains('/') => {
                return Err(bad(format!("database name {db:?} must not contain '/'")));
            }
            db => config.database = Some(db.to_owned()),
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

    /// Applies the URL option or backend setting `key`.
    fn apply_option(&mut self, key: &str, value: String) -> std::result::Result<(), String> {
        let duration = |v: &str| parse_duration(v).map_err(|why| format!("option {key}: {why}"));
        match key {
            "ttl" => self.ttl = duration(&value)?,
            "connect_timeout" => self.connect_timeout = duration(&value)?,
            "request_timeout" => self.request_timeout = duration(&value)?,
            "prefix" => self.prefix = value,
            "holder" => self.holder = Some(value),
            "table_prefix" => self.table_prefix = value,
            "layout" => self.layout = Layout::parse(&value)?,
            "pool_size" => {
                self.pool_size = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("pool_size={value:?} is not a positive number"))?;
            }
            "ssl_mode" | "ssl-mode" => self.ssl_mode = Some(parse_ssl_mode(&value)?),
            "ssl_ca" => self.tls.ca = Some(PathBuf::from(value)),
            name if self.tls.set(name, &value) => {}
            other => return Err(format!("unknown option {other:?}; known: {OPTIONS}")),
        }
        Ok(())
    }

    /// Applies `settings` over this config: the client settings, `layout`,
    /// `table_prefix`, `pool_size`, `ssl_mode` and `tls.ca`. A setting
    /// MySQL has no use for is `Unsupported`, naming it.
    pub fn with_settings(mut self, settings: &Settings) -> Result<Self> {
        settings.refuse_others_than_client("mysql", SETTINGS)?;
        self.apply_client_settings(settings);
        if let Some(ttl) = settings.ttl {
            self.ttl = ttl;
        }
        for (name, value) in &settings.options {
            self.apply_option(name, value.clone())
                .map_err(|why| Error::invalid_config(format!("mysql {why}")))?;
        }
        self.check()?;
        Ok(self)
    }

    /// Sets the database the lock tables live in.
    pub fn with_database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// Sets what the lock tables' names start with (letters, digits and
    /// `_`, at most 48 characters; checked on connect).
    pub fn with_table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
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
    pub fn with_ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = Some(mode);
        self
    }

    /// Whether to use TLS: the mode written, or else [`SslMode::Required`]
    /// when `tls.ca` is given and [`SslMode::Disabled`] when it is not.
    /// Asking for TLS never ends in plain text.
    pub(crate) fn ssl_mode(&self) -> SslMode {
        match self.ssl_mode {
            Some(mode) => mode,
            None if self.tls.ca.is_some() => SslMode::Required,
            None => SslMode::Disabled,
        }
    }

    /// Trusts the CA certificates of this PEM file when verifying the server.
    pub fn with_tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Sets how many connections serve requests (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// The user to log in as.
    pub(crate) fn user(&self) -> &str {
        self.username.as_deref().unwrap_or(DEFAULT_USER)
    }

    /// The default lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How locks are kept.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// What the lock tables' names start with.
    pub fn table_prefix(&self) -> &str {
        &self.table_prefix
    }

    /// Checks what can be checked before connecting.
    pub(crate) fn check(&self) -> Result<()> {
        check_table_prefix(&self.table_prefix)?;
        check_ttl(self.ttl)?;
        self.tls.check("mysql")?;
        if self.tls.cert.is_some() {
            return Err(Error::unsupported(
                "mysql does not support client certificates (tls.cert, tls.key); \
                 only tls.ca is taken",
            ));
        }
        if self.ssl_mode == Some(SslMode::Disabled) && self.tls.ca.is_some() {
            return Err(Error::invalid_config(
                "mysql ssl_mode=disabled contradicts the TLS file given (tls.ca): remove one or \
                 the other",
            ));
        }
        for (what, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid_config(format!(
                    "mysql {what} must be more than zero"
                )));
            }
        }
        if self.layout == Layout::Table && self.database.as_deref().is_none_or(str::is_empty) {
            return Err(Error::invalid_config(
                "mysql layout=table needs a database for its tables: \
                 mysql://user:pass@host:port/DATABASE",
            ));
        }
        Ok(())
    }
}

/// `InvalidConfig` for a TTL that is zero or below [`MIN_TTL`].
pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    distlock_core::check_ttl(ttl)?;
    if ttl < MIN_TTL {
        return Err(Error::invalid_config(format!(
            "a mysql lease TTL must be at least {}, got {}",
            distlock_core::raw::human_duration(MIN_TTL),
            distlock_core::raw::human_duration(ttl)
        )));
    }
    Ok(())
}

fn check_table_prefix(prefix: &str) -> Result<()> {
    let well_formed = !prefix.is_empty()
        && prefix.len() <= MAX_TABLE_PREFIX_LEN
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if well_formed {
        Ok(())
    } else {
        Err(Error::invalid_config(format!(
            "mysql table_prefix {prefix:?}: use letters, digits and _, at most \
             {MAX_TABLE_PREFIX_LEN} characters"
        )))
    }
}

fn parse_ssl_mode(value: &str) -> std::result::Result<SslMode, String> {
    match value.to_ascii_lowercase().as_str() {
        "disabled" | "disable" => Ok(SslMode::Disabled),
        "required" | "require" | "verify_ca" | "verify_identity" => Ok(SslMode::Required),
        other => Err(format!(
            "ssl_mode={other:?} is not one of disabled, required, verify_ca, verify_identity"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn a_full_url_parses() {
        let config = MysqlConfig::from_url(
            "mariadb://app:s%40cret@db.example:3307/locks?ttl=5s&connect_timeout=2s\
             &request_timeout=3s&prefix=jobs/&holder=w1&table_prefix=app_&layout=named\
             &pool_size=3&ssl_mode=disabled",
        )
        .unwrap();
        assert_eq!(config.host, "db.example");
        assert_eq!(config.port, 3307);
        assert_eq!(config.database.as_deref(), Some("locks"));
        assert_eq!(config.user(), "app");
        assert_eq!(config.password.as_deref(), Some("s@cret"));
        assert_eq!(config.ttl, Duration::from_secs(5));
        assert_eq!(config.connect_timeout, Duration::from_secs(2));
        assert_eq!(config.request_timeout, Duration::from_secs(3));
        assert_eq!(config.prefix, "jobs/");
        assert_eq!(config.holder.as_deref(), Some("w1"));
        assert_eq!(config.table_prefix, "app_");
        assert_eq!(config.layout, Layout::Named);
        assert_eq!(config.pool_size, 3);
        assert_eq!(config.ssl_mode(), SslMode::Disabled);
    }

    #[test]
    fn a_ca_file_requires_tls() {
        let mode = |url: &str| MysqlConfig::from_url(url).unwrap().ssl_mode();
        assert_eq!(mode("mysql://h/db"), SslMode::Disabled);
        assert_eq!(mode("mysql://h/db?tls.ca=/ca.pem"), SslMode::Required);
        assert_eq!(mode("mysql://h/db?ssl_ca=/ca.pem"), SslMode::Required);
    }

    #[test]
    fn a_tls_file_requires_tls_and_refuses_disabled() {
        let mode = |url: &str| MysqlConfig::from_url(url).unwrap().ssl_mode();
        assert_eq!(mode("mysql://h/db?tls.ca=/ca.pem"), SslMode::Required);
        assert_eq!(
            mode("mysql://h/db?tls.ca=/ca.pem&ssl_mode=verify_ca"),
            SslMode::Required
        );
        for url in [
            "mysql://h/db?ssl_mode=disabled&tls.ca=/ca.pem",
            "mysql://h/db?ssl_ca=/ca.pem&ssl_mode=disabled",
        ] {
            let err = MysqlConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}");
            assert!(err.to_string().contains("ssl_mode=disabled"), "{err}");
        }
    }

    #[test]
    fn client_certificates_are_refused_naming_mysql() {
        for url in [
            "mysql://h/db?tls.cert=/c.pem&tls.key=/k.pem",
            "mysql://h/db?tls.ca=/ca.pem&tls.cert=/c.pem&tls.key=/k.pem",
        ] {
            let err = MysqlConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{url}");
            assert!(err.message().contains("mysql"), "{err}");
        }
        let err = MysqlConfig::from_url("mysql://h/db?tls.cert=/c.pem").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("together"), "{err}");
    }

    #[test]
    fn defaults_fill_a_short_url() {
        let config = MysqlConfig::from_url("mysql://localhost/db").unwrap();
        assert_eq!((config.port, config.user()), (DEFAULT_PORT, "root"));
        assert_eq!(config.table_prefix, DEFAULT_TABLE_PREFIX);
        assert_eq!(config.layout, Layout::Table);
    }

    #[test]
    fn the_password_never_shows() {
        let config = MysqlConfig::from_url("mysql://u:hunter2@h/db").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
        let err = MysqlConfig::from_url("mysql://u:hunter2@h/db?bogus=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn bad_input_is_a_typed_error_naming_it() {
        for (url, names) in [
            ("redis://h/db", "scheme"),
            ("mysql://h/db?ttl=0s", "TTL"),
            ("mysql://h/db?ttl=10ms", "at least"),
            ("mysql://h/db?table_prefix=bad-name", "table_prefix"),
            ("mysql://h/db?ssl_mode=sometimes", "ssl_mode"),
            ("mysql://a,b/db", "one host"),
            ("mysql://h/db?connect_timeout=soon", "connect_timeout"),
            ("mysql://h/db?layout=rows", "layout"),
            ("mysql://h", "database"),
        ] {
            let err = MysqlConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
            assert!(err.to_string().contains(names), "{url}: {err}");
        }
        // The named layout needs no database.
        MysqlConfig::from_url("mysql://h?layout=named").unwrap();
    }

    #[test]
    fn settings_apply_and_unknown_ones_are_refused() {
        let settings = Settings {
            ttl: Some(Duration::from_secs(2)),
            prefix: Some("p/".into()),
            ..Settings::default()
        };
        let config = MysqlConfig::new("h", 1)
            .with_database("db")
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
        let err = MysqlConfig::new("h", 1)
            .with_database("db")
            .with_settings(&fsync)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("fsync"), "{err}");
    }
}
