//! `ZkConfig`: what to connect to and how, checked into [`Resolved`] before any I/O.

use std::fmt;
use std::time::Duration;

use distlock_core::raw::{ClientFields, Settings, serde_humane};
use distlock_core::{ClientConfig, Error, Result};
use serde::Deserialize;

use crate::keys::{Layout, NodeLayout};

/// The port used when a server address has none.
pub const DEFAULT_PORT: u16 = 2181;

/// The session timeout, hence every lock's TTL, when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// The lock root when none is configured.
pub(crate) const DEFAULT_PREFIX: &str = "/distlock";

/// The shortest session timeout (hence lock TTL) accepted. Below it the
/// window in which a held lock is vouched for (about a third of the session
/// timeout, minus the drift allowance) would be a few milliseconds: shorter
/// than a round trip on a loaded machine.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(100);

/// How to reach ZooKeeper and where to keep the locks.
///
/// Build it with [`ZkConfig::from_url`] (`zk://h1:2181,h2:2181/chroot/locks`),
/// with the `with_*` methods, or deserialize it (durations are written
/// `"500ms"` or `"2s"`; a bare number is seconds).
///
/// ZooKeeper leases are sessions: the session timeout is the TTL of every
/// lock this client holds. `session_timeout` sets it; when it is left at zero,
/// `default_ttl` is used instead (so configs written for other backends keep
/// working). When both are set, `session_timeout` wins.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZkConfig {
    /// Servers as `host:port` (IPv6 as `[addr]:port`).
    pub servers: Vec<String>,
    /// The lock root: an absolute path under which `locks/` and `elections/`
    /// are created (the URL's path). Default `/distlock`. It does not apply
    /// with [`NodeLayout::Curator`], which refuses any other value but `/`.
    pub prefix: String,
    /// Where lock and election nodes go (the URL's `layout` option):
    /// distlock's own tree (the default), or the paths of Apache Curator's
    /// recipes, to share locks with Curator clients.
    pub layout: NodeLayout,
    /// The lease TTL, i.e. the session timeout when `session_timeout` is
    /// zero. Serialized as `ttl`, as in every distlock config.
    #[serde(rename = "ttl", with = "serde_humane")]
    pub default_ttl: Duration,
    /// The requested session timeout; zero means "use `default_ttl`". The
    /// server clamps it to its `minSessionTimeout..maxSessionTimeout`.
    #[serde(with = "serde_humane")]
    pub session_timeout: Duration,
    /// How long [`ZkBackend::connect`](crate::ZkBackend::connect) may take to
    /// establish the session.
    #[serde(with = "serde_humane")]
    pub connect_timeout: Duration,
    /// How long any single request may take before it counts as failed.
    #[serde(with = "serde_humane")]
    pub request_timeout: Duration,
    /// Digest-auth user (`addauth digest user:password`). Lock nodes are then
    /// created with an ACL that gives this identity all rights and everyone
    /// else only READ, so other identities cannot delete them.
    pub username: Option<String>,
    /// Digest-auth password; never printed by `Debug`.
    pub password: Option<String>,
    /// Who holds this client's locks, as operators see it in `inspect`
    /// (the URL's `holder` option): stored as each lock node's data.
    /// `None` stores `host:pid`; an acquisition's own label wins.
    pub holder: Option<String>,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            servers: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            prefix: DEFAULT_PREFIX.to_owned(),
            layout: NodeLayout::Distlock,
            default_ttl: DEFAULT_TTL,
            session_timeout: Duration::ZERO,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            username: None,
            password: None,
            holder: None,
        }
    }
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig")
            .field("servers", &self.servers)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("default_ttl", &self.default_ttl)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("holder", &self.holder)
            .finish()
    }
}

impl ClientConfig for ZkConfig {
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

impl ZkConfig {
    /// A config for these servers (`host:port`), everything else default.
    pub fn new<S: Into<String>>(servers: impl IntoIterator<Item = S>) -> Self {
        ZkConfig {
            servers: servers.into_iter().map(Into::into).collect(),
            ..ZkConfig::default()
        }
    }

    /// Sets the node layout; [`NodeLayout::Curator`] shares locks and
    /// elections with Apache Curator clients.
    pub fn with_layout(mut self, layout: NodeLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets the session timeout, which is also every lock's TTL (so it sets
    /// `default_ttl` too).
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self.default_ttl = timeout;
        self
    }

    /// Parses `zk://[user:password@]host[:port][,host[:port]...][/lock/root][?options]`.
    ///
    /// Options: `ttl` (alias `session_timeout`; both set the session
    /// timeout), `connect_timeout`, `request_timeout` (durations such as
    /// `500ms` or `2s`; a bare number is seconds), `username`, `password`, `layout` (`distlock` or
    /// `curator`; see [`NodeLayout`]), `holder` (the description stored
    /// with each lock). A malformed URL gives
    /// `InvalidConfig` naming what is wrong.
    pub fn from_url(url: &str) -> Result<Self> {
        crate::url::parse(url)
    }

    /// Checks every field that can be checked without a connection.
    pub fn validate(&self) -> Result<()> {
        self.resolve().map(|_| ())
    }

    /// Applies the [`Settings`] ZooKeeper honours over these (`ttl`, which is
    /// the session timeout, `connect_timeout`, `request_timeout`,
    /// `username`, `password`, `prefix`, `layout`, `holder`), and refuses
    /// the others.
    pub fn with_settings(mut self, settings: &Settings) -> Result<Self> {
        settings.refuse_others_than_client("ZooKeeper", &["layout"])?;
        self.apply_client_settings(settings);
        if let Some(ttl) = settings.ttl {
            distlock_core::check_ttl(ttl)?;
            self = self.with_session_timeout(ttl);
        }
        for (name, value) in &settings.options {
            crate::url::apply_option(&mut self, name, value)
                .map_err(|why| Error::invalid_config(format!("zk {why}")))?;
        }
        self.validate()?;
        Ok(self)
    }

    /// Checks every field and derives what a connection needs.
    pub(crate) fn resolve(&self) -> Result<Resolved> {
        if self.servers.is_empty() {
            return Err(Error::invalid_config("zk config lists no servers"));
        }
        for server in &self.servers {
            check_server(server)?;
        }
        let layout = Layout::new(self.layout, &self.prefix)?;
        let session_timeout = if self.session_timeout.is_zero() {
            self.default_ttl
        } else {
            if !self.default_ttl.is_zero() && self.default_ttl != self.session_timeout {
                tracing::warn!(
                    session_timeout = ?self.session_timeout,
                    default_ttl = ?self.default_ttl,
                    "zk default_ttl differs from session_timeout; the session timeout is the TTL of every lock"
                );
            }
            self.session_timeout
        };
        distlock_core::check_ttl(session_timeout)?;
        // ZooKeeper counts session timeouts in whole milliseconds.
        let session_timeout = Duration::from_millis(
            u64::try_from(session_timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
        );
        if session_timeout < MIN_SESSION_TIMEOUT {
            return Err(Error::invalid_config(format!(
                "zk session timeout (the TTL of every lock) {session_timeout:?} is below the \
                 minimum of {MIN_SESSION_TIMEOUT:?}; choose a longer TTL"
            )));
        }
        if session_timeout > Duration::from_millis(i32::MAX as u64) {
            return Err(Error::invalid_config(format!(
                "zk session timeout {session_timeout:?} is too long"
            )));
        }
        for (what, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid_config(format!(
                    "zk {what} must be greater than zero"
                )));
            }
        }
        let credentials = match (&self.username, &self.password) {
            (None, None) => None,
            (Some(user), Some(password)) => {
                if user.is_empty() || user.contains(':') {
                    return Err(Error::invalid_config(format!(
                        "zk username {user:?} must be non-empty and contain no ':'"
                    )));
                }
                Some(Credentials {
                    username: user.clone(),
                    password: password.clone(),
                })
            }
            (Some(user), None) => {
                return Err(Error::invalid_config(format!(
                    "zk username {user:?} is set without a password"
                )));
            }
            (None, Some(_)) => {
                return Err(Error::invalid_config(
                    "zk password is set without a username",
                ));
            }
        };
        if let Some(holder) = &self.holder {
            check_holder(holder)?;
        }
        Ok(Resolved {
            connect_string: self.servers.join(","),
            layout,
            session_timeout,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            credentials,
            holder: self.holder.clone(),
        })
    }
}

/// The longest holder description: node data is read whole by every
/// `inspect`, so it stays a label, not a payload.
pub(crate) const MAX_HOLDER_LEN: usize = 1024;

/// A holder description must say something and stay a label.
pub(crate) fn check_holder(holder: &str) -> Result<()> {
    if holder.trim().is_empty() {
        return Err(Error::invalid_config(
            "zk holder description is empty; set a label such as billing-worker-3, or leave it \
             unset for host:pid",
        ));
    }
    if holder.len() > MAX_HOLDER_LEN {
        return Err(Error::invalid_config(format!(
            "zk holder description is {} bytes long; at most {MAX_HOLDER_LEN} are allowed",
            holder.len()
        )));
    }
    Ok(())
}

fn check_server(server: &str) -> Result<()> {
    let bad = |why: &str| Error::invalid_config(format!("zk server {server:?}: {why}"));
    let (host, port) = if let Some(rest) = server.strip_prefix('[') {
        let (host, rest) = rest
            .split_once(']')
            .ok_or_else(|| bad("unclosed [ in IPv6 address"))?;
        let port = rest
            .strip_prefix(':')
            .ok_or_else(|| bad("expected [address]:port"))?;
        (host, port)
    } else {
        server
            .rsplit_once(':')
            .ok_or_else(|| bad("expected host:port"))?
    };
    if host.is_empty() || host.contains(['/', ',', '@', ' ']) {
        return Err(bad("the host is empty or malformed"));
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(()),
        _ => Err(bad(&format!("port {port:?} is not a number in 1..=65535"))),
    }
}

/// Digest-auth credentials.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) username: String,
    pub(crate) password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A checked config.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) connect_string: String,
    pub(crate) layout: Layout,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) credentials: Option<Credentials>,
    /// The configured holder description, if any.
    pub(crate) holder: Option<String>,
}

impl Resolved {
    /// Who we are, for messages.
    pub(crate) fn identity(&self) -> String {
        match &self.credentials {
            Some(c) => format!("digest user {:?}", c.username),
            None => "an anonymous client (no username configured)".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn debug_redacts_the_password() {
        let config = ZkConfig::default().with_credentials("alice", "s3cret");
        let text = format!("{config:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.contains("alice") && text.contains("redacted"),
            "{text}"
        );
        let settings = config.resolve().unwrap();
        assert!(!format!("{settings:?}").contains("s3cret"));
    }

    #[test]
    fn session_timeout_wins_over_default_ttl() {
        let config = ZkConfig::default().with_session_timeout(Duration::from_secs(2));
        assert_eq!(
            config.resolve().unwrap().session_timeout,
            Duration::from_secs(2)
        );
        let both = ZkConfig {
            session_timeout: Duration::from_secs(3),
            ..ZkConfig::default()
        };
        assert_eq!(
            both.resolve().unwrap().session_timeout,
            Duration::from_secs(3)
        );
        let ttl_only = ZkConfig {
            default_ttl: Duration::from_secs(4),
            ..ZkConfig::default()
        };
        assert_eq!(
            ttl_only.resolve().unwrap().session_timeout,
            Duration::from_secs(4)
        );
        let zero = ZkConfig {
            default_ttl: Duration::ZERO,
            ..ZkConfig::default()
        };
        assert_eq!(zero.resolve().unwrap_err().kind(), ErrorKind::InvalidConfig);
        let short = ZkConfig::default().with_session_timeout(Duration::from_millis(99));
        let err = short.resolve().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("100ms"), "names the minimum: {err}");
        let fraction = ZkConfig::default().with_session_timeout(Duration::from_micros(1_500_200));
        assert_eq!(
            fraction.resolve().unwrap().session_timeout,
            Duration::from_millis(1501),
            "rounded up to whole milliseconds"
        );
    }

    #[test]
    fn bad_fields_name_what_is_wrong() {
        let cases = [
            (ZkConfig::new(Vec::<String>::new()), "no servers"),
            (ZkConfig::new(["h1"]), "host:port"),
            (ZkConfig::new(["h1:x"]), "port"),
            (ZkConfig::default().with_prefix("locks"), "absolute"),
            (
                ZkConfig::default().with_connect_timeout(Duration::ZERO),
                "connect_timeout",
            ),
        ];
        for (config, needle) in cases {
            let err = config.resolve().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.message().contains(needle), "{needle}: {err}");
        }
        let half = ZkConfig {
            username: Some("bob".into()),
            ..ZkConfig::default()
        };
        assert!(
            half.resolve()
                .unwrap_err()
                .message()
                .contains("without a password")
        );
    }

    #[test]
    fn holder_comes_from_settings_and_must_be_a_label() {
        let settings = Settings {
            holder: Some("billing-worker-3".into()),
            ..Settings::default()
        };
        let config = ZkConfig::default().with_settings(&settings).unwrap();
        assert_eq!(config.holder.as_deref(), Some("billing-worker-3"));
        assert_eq!(
            config.resolve().unwrap().holder.as_deref(),
            Some("billing-worker-3")
        );
        for (bad, needle) in [("  ", "empty"), (&*"x".repeat(1025), "at most 1024")] {
            let err = ZkConfig::default().with_holder(bad).resolve().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.message().contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn deserializes_from_json_with_text_durations() {
        let config: ZkConfig = serde_json::from_str(
            r#"{"servers": ["[::1]:2181"], "session_timeout": "2s", "request_timeout": "750ms", "connect_timeout": 3}"#,
        )
        .unwrap();
        let settings = config.resolve().unwrap();
        assert_eq!(settings.session_timeout, Duration::from_secs(2));
        assert_eq!(settings.request_timeout, Duration::from_millis(750));
        assert_eq!(settings.connect_timeout, Duration::from_secs(3));
        assert_eq!(settings.connect_string, "[::1]:2181");
        assert_eq!(
            settings.layout,
            Layout::new(NodeLayout::Distlock, "/distlock").unwrap()
        );
        let curator: ZkConfig = serde_json::from_str(r#"{"layout": "curator"}"#).unwrap();
        assert_eq!(curator.layout, NodeLayout::Curator);
        assert_eq!(curator.resolve().unwrap().layout, Layout::Curator);
        assert!(serde_json::from_str::<ZkConfig>(r#"{"layout": "etcd"}"#).is_err());
    }
}
