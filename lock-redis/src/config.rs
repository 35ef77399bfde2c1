//! Configuration of the Redis and Redlock backends, from structs or URLs.
//!
//! Both configs are plain serde structs so they can come from a config file;
//! `from_url` parses the URL forms the facade hands over. `Debug` never shows
//! a password.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use distlock_core::raw::{ClientFields, TlsFiles};
use distlock_core::raw::{Settings, serde_humane};
use distlock_core::{ClientConfig, Error, Result, check_ttl};
use serde::{Deserialize, Serialize};

use crate::url::{self, ParsedUrl, UrlOption};

/// Default lease TTL: long enough for a GC pause, short enough that a crashed
/// holder does not block others for long (Redisson's watchdog uses 30 s too).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default limit on establishing a connection (TCP, TLS, AUTH, SELECT).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default limit on one command round trip.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "distlock:";
/// Default Redis port.
pub const DEFAULT_PORT: u16 = 6379;
/// The settings Redis and Redis Cluster take beyond the client settings.
pub(crate) const SETTINGS: &[&str] = &[
    "tls",
    "tls_insecure",
    "tls.ca",
    "tls.cert",
    "tls.key",
    "fair",
    "layout",
];
/// Redlock's: those of Redis but `fair`, since its waiters always race.
pub(crate) const REDLOCK_SETTINGS: &[&str] =
    &["tls", "tls_insecure", "tls.ca", "tls.cert", "tls.key"];

/// One Redis server address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerAddr {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl ServerAddr {
    /// `host:port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        ServerAddr {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// TLS settings, used when `enabled` (the `rediss://` scheme).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsConfig {
    /// Connect with TLS.
    pub enabled: bool,
    /// Accept any certificate and host name. For tests only: it gives up the
    /// protection TLS is for. URL: `#insecure` or `?tls_insecure=true`.
    /// Refused unless distlock-redis is built with the cargo feature
    /// `insecure-tls` (off by default, not in the facade's `full`).
    pub insecure: bool,
    /// The root certificates to trust instead of the system store
    /// (`tls.ca`), and the client's certificate and key (`tls.cert`,
    /// `tls.key`), for servers that authenticate clients
    /// (`tls-auth-clients yes`). Any of them turns TLS on in a URL or the
    /// settings.
    #[serde(skip_serializing_if = "TlsFiles::is_empty")]
    pub files: TlsFiles,
}

impl TlsConfig {
    /// Checks the settings that belong together, and that accepting any
    /// certificate was compiled in if asked for.
    fn validate(&self) -> Result<()> {
        check_insecure_allowed(self.insecure, cfg!(feature = "insecure-tls"))?;
        self.files.check("redis")
    }
}

/// Refuses `tls_insecure` in a build that did not opt in to it.
fn check_insecure_allowed(insecure: bool, compiled_in: bool) -> Result<()> {
    if insecure && !compiled_in {
        return Err(Error::unsupported(
            "redis tls_insecure (#insecure) accepts any certificate and is for tests only; \
             it needs distlock-redis built with the cargo feature `insecure-tls` \
             (distlock: `redis-insecure-tls`)",
        ));
    }
    Ok(())
}

/// Whose key layout a backend uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// This crate's own keys (`<prefix>lock:{<name>}:owner` and its
    /// companions): FIFO queue, fencing counter, holder record.
    #[default]
    Distlock,
    /// One key per lock, `<prefix><name>`, taken with `SET NX PX` and a
    /// random value, as redis-py's `Lock`, go-redsync and node-redlock take
    /// it, so that they and distlock exclude each other. One server only;
    /// the default prefix is empty. See the crate docs' "layout=plain".
    Plain,
}

impl Layout {
    /// Every layout, in the order messages list them.
    pub const ALL: [Layout; 2] = [Layout::Distlock, Layout::Plain];

    /// The layout's name in URLs and config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Distlock => "distlock",
            Layout::Plain => "plain",
        }
    }

    /// The layout named `text`; anything else is a message listing the
    /// known ones.
    pub(crate) fn parse(text: &str) -> std::result::Result<Layout, String> {
        Layout::ALL
            .into_iter()
            .find(|layout| layout.as_str() == text)
            .ok_or_else(|| format!("layout {text:?} is not distlock or plain"))
    }

    fn is_default(&self) -> bool {
        *self == Layout::default()
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Settings shared by the single-server and the Redlock backends.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CommonConfig {
    /// Database number (`SELECT`); URL path `/N`.
    pub db: i64,
    /// ACL user name; URL userinfo `user:` part.
    pub username: Option<String>,
    /// Password (`AUTH`); URL userinfo `:password` part.
    pub password: Option<String>,
    /// TLS settings; `rediss://` turns TLS on.
    pub tls: TlsConfig,
    /// Prefix of every key and channel; must not contain `{` or `}`, which
    /// would break the `{name}` hash tags.
    pub prefix: String,
    /// Lease TTL used when acquire options leave it unset. Serialized as
    /// `ttl`, like every duration a humane string (`"30s"`).
    #[serde(rename = "ttl", with = "serde_humane")]
    pub default_ttl: Duration,
    /// Limit on establishing a connection.
    #[serde(with = "serde_humane")]
    pub connect_timeout: Duration,
    /// Limit on one command round trip.
    #[serde(with = "serde_humane")]
    pub request_timeout: Duration,
    /// The holder description stored with every grant, for operators
    /// (`inspect`), unless the acquire sets its own; `None` is `host:pid`.
    /// URL: `?holder=billing-worker-3`.
    pub holder: Option<String>,
    /// Waiters of a lock queue in arrival order and the release hands the
    /// lock to the first (`true`, the default), or race for it whenever a
    /// release leaves it free (`false`, non-fair: in no order; see the
    /// crate docs' "Non-fair mode"). Redlock waiters always race. URL:
    /// `?fair=false`. The plain layout has no queue and refuses `false`.
    pub fair: bool,
    /// Whose keys to use: [`Layout::Distlock`] (the default) or
    /// [`Layout::Plain`], to share locks with redis-py, go-redsync and
    /// node-redlock. URL and setting: `layout`.
    #[serde(skip_serializing_if = "Layout::is_default")]
    pub layout: Layout,
}

impl Default for CommonConfig {
    fn default() -> Self {
        CommonConfig {
            db: 0,
            username: None,
            password: None,
            tls: TlsConfig::default(),
            prefix: DEFAULT_PREFIX.to_owned(),
            default_ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            holder: None,
            fair: true,
            layout: Layout::Distlock,
        }
    }
}

impl CommonConfig {
    /// Checks every field that can be checked without a network call.
    pub fn validate(&self) -> Result<()> {
        check_ttl(self.default_ttl)
            .map_err(|e| Error::invalid_config(format!("redis ttl: {}", e.message())))?;
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid_config(
                "redis connect_timeout must be greater than zero",
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(Error::invalid_config(
                "redis request_timeout must be greater than zero",
            ));
        }
        if self.layout == Layout::Plain {
            return self.validate_plain();
        }
        if self.prefix.contains(['{', '}']) {
            return Err(Error::invalid_config(format!(
                "redis key prefix {:?} contains '{{' or '}}'; those would break the {{name}} hash tags that keep a lock's keys in one cluster slot",
                self.prefix
            )));
        }
        self.tls.validate()?;
        if self.db < 0 {
            return Err(Error::invalid_config(format!(
                "redis database number {} is negative",
                self.db
            )));
        }
        Ok(())
    }

    /// The checks of the plain layout: it has no queue to be fair with,
    /// and its keys need no hash tag, so the prefix may hold braces.
    fn validate_plain(&self) -> Result<()> {
        if !self.fair {
            return Err(Error::invalid_config(
                "redis layout=plain: fair=false does not apply: the plain layout has no queue, its waiters always race (poll); leave fair out",
            ));
        }
        if self.db < 0 {
            return Err(Error::invalid_config(format!(
                "redis database number {} is negative",
                self.db
            )));
        }
        Ok(())
    }

    /// Applies the [`Settings`] Redis honours over these (the client
    /// settings and the Redis settings: `tls`, `tls_insecure`, `tls.ca`,
    /// `tls.cert`, `tls.key`, `fair`, `layout`), and refuses the others.
    pub fn apply_settings(&mut self, settings: &Settings) -> Result<()> {
        self.apply_settings_of("Redis", SETTINGS, settings)
    }

    /// Applies `settings` for `backend`, which takes the client settings
    /// and `taken`; any other is `Unsupported`, naming it and the backend.
    pub(crate) fn apply_settings_of(
        &mut self,
        backend: &str,
        taken: &[&str],
        settings: &Settings,
    ) -> Result<()> {
        settings.refuse_others_than_client(backend, taken)?;
        let was_default_prefix = self.prefix == DEFAULT_PREFIX;
        self.apply_client_settings(settings);
        self.default_ttl = settings.ttl.unwrap_or(self.default_ttl);
        let mut options = Vec::new();
        for (name, value) in &settings.options {
            let option = url::parse_option(name, value.clone())
                .map_err(|why| Error::invalid_config(format!("redis {why}")))?;
            options.push(option);
        }
        let prefix_given = settings.prefix.is_some() || !was_default_prefix;
        self.apply_options(options, prefix_given)?;
        self.validate()
    }

    pub(crate) fn apply(&mut self, parsed: ParsedUrl) -> Result<()> {
        self.db = parsed.db.unwrap_or(self.db);
        self.username = parsed.username;
        self.password = parsed.password;
        self.tls.enabled = parsed.tls;
        self.apply_options(parsed.options, false)
    }

    /// Applies `options`, given together (one URL, or one layer of
    /// settings). `fair` with `layout=plain` is refused: that layout has no
    /// queue. Switching to the plain layout empties a default prefix
    /// unless `prefix_given` or `options` set one.
    fn apply_options(&mut self, options: Vec<UrlOption>, prefix_given: bool) -> Result<()> {
        let has = |wanted: fn(&UrlOption) -> bool| options.iter().any(wanted);
        let plain = has(|o| matches!(o, UrlOption::Layout(Layout::Plain)));
        if plain && has(|o| matches!(o, UrlOption::Fair(_))) {
            return Err(Error::invalid_config(
                "redis layout=plain takes no fair setting: the plain layout has no queue, its waiters always race (poll)",
            ));
        }
        let prefix_given = prefix_given || has(|o| matches!(o, UrlOption::Prefix(_)));
        let plain_text_asked = has(|o| matches!(o, UrlOption::Tls(false)));
        for option in options {
            self.apply_option(option);
        }
        if plain_text_asked && self.tls.enabled {
            return Err(Error::invalid_config(
                "redis tls=false contradicts TLS asked for elsewhere (a rediss:// URL, tls=true, or a tls.ca, tls.cert or tls.key file): remove one of them",
            ));
        }
        if plain && !prefix_given && self.prefix == DEFAULT_PREFIX {
            self.prefix.clear();
        }
        Ok(())
    }

    fn apply_option(&mut self, option: UrlOption) {
        match option {
            UrlOption::Prefix(prefix) => self.prefix = prefix,
            UrlOption::Holder(holder) => self.holder = Some(holder),
            UrlOption::DefaultTtl(ttl) => self.default_ttl = ttl,
            UrlOption::ConnectTimeout(t) => self.connect_timeout = t,
            UrlOption::RequestTimeout(t) => self.request_timeout = t,
            UrlOption::Tls(on) => self.tls.enabled |= on,
            UrlOption::TlsInsecure(on) => self.tls.insecure = on,
            UrlOption::TlsCaFile(path) => {
                self.tls.enabled = true;
                self.tls.files.ca = Some(PathBuf::from(path));
            }
            UrlOption::TlsCertFile(path) => {
                self.tls.enabled = true;
                self.tls.files.cert = Some(PathBuf::from(path));
            }
            UrlOption::TlsKeyFile(path) => {
                self.tls.enabled = true;
                self.tls.files.key = Some(PathBuf::from(path));
            }
            UrlOption::Fair(on) => self.fair = on,
            UrlOption::Layout(layout) => self.layout = layout,
        }
    }

    pub(crate) fn debug_fields(&self, s: &mut fmt::DebugStruct<'_, '_>) {
        s.field("db", &self.db)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("prefix", &self.prefix)
            .field("default_ttl", &self.default_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("holder", &self.holder)
            .field("fair", &self.fair)
            .field("layout", &self.layout);
    }
}

impl ClientConfig for CommonConfig {
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

impl ClientConfig for RedisConfig {
    fn client_fields(&mut self) -> ClientFields<'_> {
        self.common.client_fields()
    }
}

impl ClientConfig for RedlockConfig {
    fn client_fields(&mut self) -> ClientFields<'_> {
        self.common.client_fields()
    }
}

impl fmt::Debug for CommonConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("CommonConfig");
        self.debug_fields(&mut s);
        s.finish()
    }
}

/// Configuration of [`RedisBackend`](crate::RedisBackend): one Redis server.
///
/// URL form: `redis://[user][:password@]host[:port][/db][?option=value&...]`,
/// or `rediss://` for TLS. Options: `ttl`, `connect_timeout`,
/// `request_timeout` (durations such as `500ms` or `30s`; a bare number is
/// seconds), `prefix`, `holder` (the description operators see), `tls`
/// (`true` is the same as `rediss://`), `tls_insecure`, `tls.ca` (a PEM
/// file of root certificates; it turns TLS on), `fair` (`false`: lock
/// waiters race instead of queueing), `layout` (`plain`: one `SET NX PX`
/// key per lock, shared with redis-py, go-redsync and node-redlock; its
/// default prefix is empty).
///
/// ```
/// use distlock_redis::RedisConfig;
/// let config = RedisConfig::from_url("redis://app:s3cret@10.0.0.5:6380/2?prefix=jobs:").unwrap();
/// assert_eq!((config.server.port, config.common.db), (6380, 2));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RedisConfig {
    /// The server.
    pub server: ServerAddr,
    /// Credentials, TLS, prefix, TTL and timeouts.
    #[serde(flatten)]
    pub common: CommonConfig,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            server: ServerAddr::new("127.0.0.1", DEFAULT_PORT),
            common: CommonConfig::default(),
        }
    }
}

/// The builder methods the configurations share, writing to their `common`
/// settings; `$backend` takes the client settings and `$taken`.
macro_rules! common_builders {
    ($backend:literal, $taken:expr) => {
        /// Sets the default lease TTL.
        pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
            self.common.default_ttl = ttl;
            self
        }

        /// Applies `settings` over the URL's (see
        /// [`CommonConfig::apply_settings`]); refuses, naming it, a setting
        /// this backend has no use for.
        pub fn with_settings(mut self, settings: &Settings) -> Result<Self> {
            self.common.apply_settings_of($backend, $taken, settings)?;
            self.validate()?;
            Ok(self)
        }

        /// Turns TLS on, trusting the CA certificates of this PEM file
        /// instead of the system store.
        pub fn with_tls_ca(mut self, path: impl Into<std::path::PathBuf>) -> Self {
            self.common.tls.enabled = true;
            self.common.tls.files.ca = Some(path.into());
            self
        }

        /// Turns TLS on, presenting this client certificate and its
        /// private key (PEM), for servers that authenticate clients.
        pub fn with_client_identity(
            mut self,
            cert: impl Into<std::path::PathBuf>,
            key: impl Into<std::path::PathBuf>,
        ) -> Self {
            self.common.tls.enabled = true;
            self.common.tls.files.cert = Some(cert.into());
            self.common.tls.files.key = Some(key.into());
            self
        }

        /// Sets the ACL user name.
        pub fn with_username(mut self, username: impl Into<String>) -> Self {
            self.common.username = Some(username.into());
            self
        }

        /// Sets the password.
        pub fn with_password(mut self, password: impl Into<String>) -> Self {
            self.common.password = Some(password.into());
            self
        }

        /// Sets the key layout; the plain layout empties a prefix left at
        /// its default (see [`CommonConfig::layout`]).
        pub fn with_layout(mut self, layout: crate::Layout) -> Self {
            if layout == crate::Layout::Plain && self.common.prefix == crate::DEFAULT_PREFIX {
                self.common.prefix.clear();
            }
            self.common.layout = layout;
            self
        }
    };
}
pub(crate) use common_builders;

/// `with_fair`, for the backends whose waiters can queue (not Redlock).
macro_rules! fair_builder {
    () => {
        /// Sets whether lock waiters queue (`true`, the default) or race
        /// (`false`); see [`CommonConfig::fair`].
        pub fn with_fair(mut self, fair: bool) -> Self {
            self.common.fair = fair;
            self
        }
    };
}
pub(crate) use fair_builder;

impl RedisConfig {
    /// A config for `host:port` with every other setting at its default.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        RedisConfig {
            server: ServerAddr::new(host, port),
            common: CommonConfig::default(),
        }
    }

    /// Parses a `redis://` or `rediss://` URL.
    ///
    /// Fails with `InvalidConfig` naming what is wrong: the scheme, a host
    /// list (use `redis+cluster://` for a cluster, `redlock://` for a
    /// quorum of independent servers), the port, the database
    /// number, an unknown option or a bad option value.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = url::parse(url, &["redis", "rediss"])?;
        if parsed.hosts.len() != 1 {
            return Err(Error::invalid_config(format!(
                "redis URL {} names {} servers; a redis:// URL takes one (use redis+cluster://h1,h2,h3 for a Redis Cluster, or redlock://h1,h2,h3 for a quorum of independent servers)",
                distlock_core::raw::redact_url(url),
                parsed.hosts.len()
            )));
        }
        let mut config = RedisConfig {
            server: parsed.hosts[0].clone(),
            common: CommonConfig::default(),
        };
        config.common.apply(parsed)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every field that can be checked without a network call.
    pub fn validate(&self) -> Result<()> {
        self.common.validate()
    }

    common_builders!("Redis", SETTINGS);
    fair_builder!();

    /// Sets the database number.
    pub fn with_db(mut self, db: i64) -> Self {
        self.common.db = db;
        self
    }

    /// Sets the TLS settings.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.common.tls = tls;
        self
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RedisConfig");
        s.field("server", &self.server);
        self.common.debug_fields(&mut s);
        s.finish()
    }
}

/// Configuration of [`RedlockBackend`](crate::RedlockBackend): N independent
/// Redis servers (no replication between them), a lock needs a majority.
///
/// URL form: `redlock://[user][:password@]h1[:port],h2[:port],h3[:port][/db][?option=value&...]`
/// with the options of [`RedisConfig`]; `tls=true` turns TLS on (there is no
/// `rediss`-like scheme for Redlock). The credentials, database and TLS
/// settings apply to every server.
///
/// ```
/// use distlock_redis::RedlockConfig;
/// let config = RedlockConfig::from_url("redlock://h1:6379,h2:6380,h3").unwrap();
/// assert_eq!(config.servers.len(), 3);
/// assert_eq!(config.quorum(), 2);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RedlockConfig {
    /// The independent servers; an odd number (3 or 5) is usual.
    pub servers: Vec<ServerAddr>,
    /// Credentials, TLS, prefix, TTL and timeouts (the same for every server).
    #[serde(flatten)]
    pub common: CommonConfig,
}

impl RedlockConfig {
    /// A config for the given servers with every other setting at its default.
    pub fn new(servers: impl IntoIterator<Item = ServerAddr>) -> Self {
        RedlockConfig {
            servers: servers.into_iter().collect(),
            common: CommonConfig::default(),
        }
    }

    /// Parses a `redlock://h1,h2,h3` URL.
    ///
    /// Fails with `InvalidConfig` naming what is wrong, `fair` included:
    /// Redlock waiters always race.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = url::parse(url, &["redlock"])?;
        if parsed
            .options
            .iter()
            .any(|o| matches!(o, UrlOption::Fair(_)))
        {
            return Err(Error::invalid_config(format!(
                "redlock URL {}: the Redlock backend has no fair setting (its waiters \
                 always race); remove fair",
                distlock_core::raw::redact_url(url)
            )));
        }
        let mut config = RedlockConfig {
            servers: parsed.hosts.clone(),
            common: CommonConfig::default(),
        };
        config.common.apply(parsed)?;
        config.validate()?;
        Ok(config)
    }

    /// Servers that must grant a lock: a strict majority.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// Checks every field that can be checked without a network call.
    pub fn validate(&self) -> Result<()> {
        check_server_list(
            &self.servers,
            "redlock needs at least one server (redlock://h1:6379,h2:6379,h3:6379)",
            "redlock server {} is listed twice; the servers must be independent",
        )?;
        refuse_plain(&self.common, "redlock")?;
        self.common.validate()
    }

    common_builders!("Redlock", REDLOCK_SETTINGS);
}

/// `Unsupported` for the plain layout on `backend` (Redlock, a cluster):
/// it is one key on one server.
pub(crate) fn refuse_plain(common: &CommonConfig, backend: &str) -> Result<()> {
    if common.layout != Layout::Plain {
        return Ok(());
    }
    Err(Error::unsupported(format!(
        "redis layout=plain is for one server (redis://host:port?layout=plain); {backend} uses the distlock layout"
    )))
}

/// [`refuse_plain`] for every mode but a single server, for configs that
/// reach `connect` without their own `validate`.
pub(crate) fn refuse_plain_beyond_one_server(
    common: &CommonConfig,
    mode: crate::servers::Mode,
) -> Result<()> {
    match mode {
        crate::servers::Mode::Single => Ok(()),
        other => refuse_plain(common, other.name()),
    }
}

/// `InvalidConfig` with `empty` when `servers` is empty, or with `twice`
/// (its `{}` replaced by the address) when an address is listed twice.
pub(crate) fn check_server_list(servers: &[ServerAddr], empty: &str, twice: &str) -> Result<()> {
    if servers.is_empty() {
        return Err(Error::invalid_config(empty));
    }
    for (i, a) in servers.iter().enumerate() {
        if servers[..i].contains(a) {
            return Err(Error::invalid_config(twice.replace("{}", &a.to_string())));
        }
    }
    Ok(())
}

impl fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RedlockConfig");
        s.field("servers", &self.servers);
        self.common.debug_fields(&mut s);
        s.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisClusterConfig;
    use distlock_core::ErrorKind;

    #[test]
    fn redis_url_with_credentials_db_and_options() {
        let c = RedisConfig::from_url(
            "rediss://app:p%40ss@cache.example:6390/3?prefix=x:&ttl=1500ms&request_timeout=0.25&holder=billing-worker-3",
        )
        .unwrap();
        assert_eq!(c.server, ServerAddr::new("cache.example", 6390));
        assert_eq!(c.common.db, 3);
        assert_eq!(c.common.username.as_deref(), Some("app"));
        assert_eq!(c.common.password.as_deref(), Some("p@ss"));
        assert!(c.common.tls.enabled && !c.common.tls.insecure);
        assert_eq!(c.common.prefix, "x:");
        assert_eq!(c.common.default_ttl, Duration::from_millis(1500));
        assert_eq!(c.common.request_timeout, Duration::from_millis(250));
        assert_eq!(c.common.holder.as_deref(), Some("billing-worker-3"));
    }

    #[test]
    fn redis_url_defaults() {
        let c = RedisConfig::from_url("redis://localhost").unwrap();
        assert_eq!(c.server, ServerAddr::new("localhost", 6379));
        assert_eq!(c.common, CommonConfig::default());
        let c = RedisConfig::from_url("redis://:pw@[::1]:7000/").unwrap();
        assert_eq!(c.server, ServerAddr::new("::1", 7000));
        assert_eq!(c.common.username, None);
        assert_eq!(c.common.password.as_deref(), Some("pw"));
    }

    #[test]
    fn debug_redacts_passwords() {
        let c = RedisConfig::from_url("redis://u:hunter2@h/0").unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let r = RedlockConfig::from_url("redlock://:hunter2@a,b,c").unwrap();
        assert!(!format!("{r:?}").contains("hunter2"));
    }

    #[test]
    fn malformed_urls_are_invalid_config_naming_the_problem() {
        let cases = [
            ("http://h", "scheme"),
            ("redis://", "host"),
            ("redis://h:notaport", "port"),
            ("redis://h:99999", "port"),
            ("redis://h/abc", "database"),
            ("redis://h/-1", "negative"),
            ("redis://h?colour=blue", "colour"),
            ("redis://h?ttl=0", "TTL"),
            ("redis://h?ttl=soon", "option ttl"),
            ("redis://h?default_ttl_ms=10", "known: ttl,"),
            ("redis://a,b", "redlock"),
            ("redis://h?prefix=a{b", "hash tag"),
            ("redlock://a,a", "twice"),
            ("redlock:///0", "host"),
            ("not a url", "scheme"),
        ];
        for (url, needle) in cases {
            let err = RedisConfig::from_url(url)
                .map(|_| ())
                .or_else(|e| {
                    if url.starts_with("redlock") {
                        RedlockConfig::from_url(url).map(|_| ())
                    } else {
                        Err(e)
                    }
                })
                .expect_err(url);
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
            assert!(err.to_string().contains(needle), "{url}: {err}");
        }
    }

    #[test]
    fn fair_is_the_default_and_fair_false_is_understood() {
        assert!(RedisConfig::from_url("redis://h").unwrap().common.fair);
        assert!(
            !RedisConfig::from_url("redis://h?fair=false")
                .unwrap()
                .common
                .fair
        );
        assert!(
            !RedisClusterConfig::from_url("redis+cluster://a,b?fair=0")
                .unwrap()
                .common
                .fair
        );
        let err = RedisConfig::from_url("redis://h?fair=maybe").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains("fair"), "{err}");
        let settings = Settings {
            options: vec![("fair".into(), "false".into())],
            ..Settings::default()
        };
        let c = RedisConfig::default().with_settings(&settings).unwrap();
        assert!(!c.common.fair);
        let partial: RedisConfig = serde_json::from_str(r#"{"fair":false}"#).unwrap();
        assert!(!partial.common.fair);
    }

    /// Redlock waiters always race, so `fair` would do nothing there.
    #[test]
    fn redlock_refuses_fair_naming_the_backend_and_the_setting() {
        for url in ["redlock://a,b,c?fair=false", "redlock://a,b,c?fair=true"] {
            let err = RedlockConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            assert!(
                err.message().contains("Redlock backend has no fair"),
                "{err}"
            );
        }
        let settings = Settings {
            options: vec![("fair".into(), "false".into())],
            ..Settings::default()
        };
        let err = RedlockConfig::from_url("redlock://a,b,c")
            .unwrap()
            .with_settings(&settings)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert!(
            err.message().contains("Redlock backend has no fair"),
            "{err}"
        );
    }

    #[test]
    fn redlock_url_lists_servers_and_quorum() {
        let c =
            RedlockConfig::from_url("redlock://u:pw@h1:1,h2,h3:3/4?tls=true&prefix=p:").unwrap();
        assert_eq!(
            c.servers,
            vec![
                ServerAddr::new("h1", 1),
                ServerAddr::new("h2", 6379),
                ServerAddr::new("h3", 3)
            ]
        );
        assert_eq!(c.quorum(), 2);
        assert_eq!(c.common.db, 4);
        assert!(c.common.tls.enabled);
        assert_eq!(c.common.password.as_deref(), Some("pw"));
    }

    #[test]
    fn accepting_any_certificate_is_refused_unless_compiled_in() {
        for url in ["rediss://h#insecure", "rediss://h?tls_insecure=true"] {
            match RedisConfig::from_url(url) {
                Ok(c) if cfg!(feature = "insecure-tls") => assert!(c.common.tls.insecure),
                Err(e) if !cfg!(feature = "insecure-tls") => {
                    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
                    assert!(e.message().contains("insecure-tls"), "{e}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        assert!(check_insecure_allowed(true, false).is_err());
        assert!(check_insecure_allowed(true, true).is_ok());
        assert!(check_insecure_allowed(false, false).is_ok());
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_a_key_its_certificate() {
        let both = RedisConfig::from_url("redis://h?tls.cert=/c.pem&tls.key=/k.pem").unwrap();
        assert!(both.common.tls.enabled, "a client certificate turns TLS on");
        assert_eq!(both.common.tls.files.cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(both.common.tls.files.key, Some(PathBuf::from("/k.pem")));
        for half in ["redis://h?tls.cert=/c.pem", "redis://h?tls.key=/k.pem"] {
            let err = RedisConfig::from_url(half).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        }
    }

    #[test]
    fn tls_false_against_tls_asked_for_elsewhere_is_refused() {
        assert!(
            !RedisConfig::from_url("redis://h?tls=false")
                .unwrap()
                .common
                .tls
                .enabled
        );
        for url in [
            "rediss://h?tls=false",
            "redis://h?tls=false&tls.ca=/ca.pem",
            "redis://h?tls.cert=/c.pem&tls.key=/k.pem&tls=no",
        ] {
            let err = RedisConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
            assert!(
                err.message().contains("tls=false contradicts"),
                "{url}: {err}"
            );
        }
        let plain_text = Settings {
            options: vec![("tls".into(), "false".into())],
            ..Settings::default()
        };
        let err = RedisConfig::from_url("rediss://h")
            .unwrap()
            .with_settings(&plain_text)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        let err = RedisConfig::from_url("redis://h?tls").unwrap_err();
        assert!(err.message().contains("not a boolean"), "{err}");
    }

    #[test]
    fn settings_override_the_url_and_unknown_ones_are_refused() {
        let settings = Settings {
            ttl: Some(Duration::from_secs(7)),
            prefix: Some("jobs:".into()),
            holder: Some("nightly-report".into()),
            options: vec![("tls.ca".into(), "/ca.pem".into())],
            ..Settings::default()
        };
        let c = RedisConfig::from_url("redis://h?ttl=3s&prefix=x:&holder=url-label")
            .unwrap()
            .with_settings(&settings)
            .unwrap();
        assert_eq!(c.common.default_ttl, Duration::from_secs(7));
        assert_eq!(c.common.prefix, "jobs:");
        assert_eq!(c.common.holder.as_deref(), Some("nightly-report"));
        assert!(c.common.tls.enabled);
        for (refused, value) in [("fsync", "x"), ("layout", "plain")] {
            let refused = Settings {
                options: vec![(refused.into(), value.into())],
                ..Settings::default()
            };
            let err = RedlockConfig::from_url("redlock://a,b,c")
                .unwrap()
                .with_settings(&refused)
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        }
        let zero = Settings {
            ttl: Some(Duration::ZERO),
            ..Settings::default()
        };
        let err = RedisConfig::default().with_settings(&zero).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    }

    #[test]
    fn layout_plain_has_an_empty_default_prefix_and_keeps_a_given_one() {
        let plain = RedisConfig::from_url("redis://h?layout=plain").unwrap();
        assert_eq!(plain.common.layout, Layout::Plain);
        assert_eq!(plain.common.prefix, "");
        let given = RedisConfig::from_url("redis://h?prefix=app:&layout=plain").unwrap();
        assert_eq!(given.common.prefix, "app:");
        let braces = RedisConfig::from_url("redis://h?layout=plain&prefix={app}:").unwrap();
        assert_eq!(braces.common.prefix, "{app}:", "no hash tag to protect");
        let layered = RedisConfig::from_url("redis://h")
            .unwrap()
            .with_settings(&Settings {
                options: vec![("layout".into(), "plain".into())],
                ..Settings::default()
            })
            .unwrap();
        assert_eq!(
            (layered.common.layout, layered.common.prefix.as_str()),
            (Layout::Plain, "")
        );
        let built = RedisConfig::new("h", 1).with_layout(Layout::Plain);
        assert_eq!(built.common.prefix, "");
        assert_eq!(
            RedisConfig::from_url("redis://h?layout=distlock")
                .unwrap()
                .common,
            CommonConfig::default()
        );
    }

    #[test]
    fn layout_plain_refuses_what_it_cannot_honour() {
        let cases = [
            (
                "redis://h?layout=plain&fair=false",
                ErrorKind::InvalidConfig,
                "fair",
            ),
            (
                "redis://h?fair=true&layout=plain",
                ErrorKind::InvalidConfig,
                "fair",
            ),
            (
                "redis://h?layout=rows",
                ErrorKind::InvalidConfig,
                "layout \"rows\"",
            ),
            (
                "redlock://a,b,c?layout=plain",
                ErrorKind::Unsupported,
                "layout=plain",
            ),
        ];
        for (url, kind, needle) in cases {
            let err = RedisConfig::from_url(url)
                .map(drop)
                .or_else(|e| match url.starts_with("redlock") {
                    true => RedlockConfig::from_url(url).map(drop),
                    false => Err(e),
                })
                .expect_err(url);
            assert_eq!(err.kind(), kind, "{url}: {err}");
            assert!(err.to_string().contains(needle), "{url}: {err}");
        }
        let fair_later = RedisConfig::from_url("redis://h?layout=plain")
            .unwrap()
            .with_fair(false)
            .validate()
            .unwrap_err();
        assert!(
            fair_later.to_string().contains("fair=false"),
            "{fair_later}"
        );
        let text =
            serde_json::to_string(&RedisConfig::default().with_layout(Layout::Plain)).unwrap();
        assert!(text.contains(r#""layout":"plain""#), "{text}");
        assert!(
            !serde_json::to_string(&RedisConfig::default())
                .unwrap()
                .contains("layout")
        );
    }

    #[test]
    fn configs_round_trip_through_serde() {
        let c = RedisConfig::from_url("redis://u:pw@h:1/2").unwrap();
        let json = serde_json::to_string(&c).unwrap();
        let back: RedisConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        assert!(json.contains(r#""ttl":"30s""#), "{json}");
        let partial: RedisConfig =
            serde_json::from_str(r#"{"server":{"host":"x","port":7}}"#).unwrap();
        assert_eq!(partial.common, CommonConfig::default());
        let humane: RedisConfig =
            serde_json::from_str(r#"{"ttl":"1500ms","request_timeout":2}"#).unwrap();
        assert_eq!(humane.common.default_ttl, Duration::from_millis(1500));
        assert_eq!(humane.common.request_timeout, Duration::from_secs(2));
    }
}
