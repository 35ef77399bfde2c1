//! [`Config`]: the backend URL plus TTL, timeouts, credentials and TLS paths,
//! from a TOML file, the environment, or code.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use distlock_core::raw::{SETTINGS, Settings, UrlParts, setting_of_url_option};
use distlock_core::{Error, Result, check_ttl};
use serde::{Deserialize, Serialize};

use crate::redact::redact_url;

/// The environment variable of the backend URL, read by [`Config::from_env`]
/// with those of [`SETTINGS`](distlock_core::raw::SETTINGS).
pub const URL_ENV: &str = "DISTLOCK_URL";

/// Every environment variable read by [`Config::from_env`]: [`URL_ENV`] and
/// one a setting.
pub fn env_vars() -> impl Iterator<Item = &'static str> {
    std::iter::once(URL_ENV).chain(SETTINGS.iter().map(|spec| spec.env))
}

/// How to reach a backend. Every field is optional: unset fields keep the
/// backend's defaults (or what the URL says), and a missing URL means the
/// embedded default, the file backend in [`distlock_file::FileConfig::default_dir`].
///
/// Every setting is one of [`SETTINGS`](distlock_core::raw::SETTINGS): the
/// client settings every networked backend honours are fields of
/// [`Settings`], a backend's own ones (`layout`, `fsync`, `fair`, `tls.*`,
/// `schema`, ...) are kept as text in [`Settings::options`] and parsed by
/// the backend, which refuses those it has no use for. In TOML they all sit
/// at the top level under their setting names (a dotted name such as
/// `tls.ca` may also be written as a `[tls]` table), and durations are
/// humane strings (`ttl = "10s"`):
///
/// ```
/// let config = distlock::Config::from_toml_str(r#"
///     url = "redis://127.0.0.1:6379/0"
///     ttl = "15s"
///     request_timeout = "2s"
///     username = "app"
///     password = "s3cret"
///     fair = false
///     [tls]
///     ca = "/etc/ssl/ca.pem"
/// "#).unwrap();
/// assert_eq!(config.settings.ttl, Some(std::time::Duration::from_secs(15)));
/// assert_eq!(config.settings.option("tls.ca"), Some("/etc/ssl/ca.pem"));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
///
/// What the user wrote most specifically wins: [`overrides`](Self::overrides)
/// (command-line flags), then the URL's own options, then
/// [`settings`](Self::settings) (the environment over the config file).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// Backend URL (`memory://`, `file:///dir`, `etcd://...`, `redis://...`,
    /// `rediss://...`, `redlock://...`, `redis+cluster://...`, `zk://...`,
    /// `postgres://...`, `mysql://...`).
    pub url: Option<String>,
    /// Every other setting, for what the URL leaves unsaid: a URL's
    /// `?ttl=` is more specific than a `ttl` for every URL.
    pub settings: Settings,
    /// Settings that win even over the URL's options: command-line flags.
    /// Never read from a file or the environment.
    pub overrides: Settings,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url.as_deref().map(redact_url))
            .field("settings", &self.settings)
            .field("overrides", &self.overrides)
            .finish()
    }
}

/// The TOML form: `url`, then every setting that is set under its name.
impl Serialize for Config {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Written<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            url: Option<&'a str>,
            #[serde(flatten)]
            settings: &'a Settings,
            #[serde(flatten)]
            options: BTreeMap<&'a str, &'a str>,
        }
        Written {
            url: self.url.as_deref(),
            settings: &self.settings,
            options: self
                .settings
                .options
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect(),
        }
        .serialize(serializer)
    }
}

/// As [`Config::from_toml_str`] reads it: an unknown key is an error naming it.
impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let table = toml::Table::deserialize(deserializer)?;
        Config::from_table(table).map_err(|e| serde::de::Error::custom(e.message()))
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

    /// Parses TOML text (see the type's docs for the keys). An unknown key
    /// is `InvalidConfig`, naming it.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let bad = |why: String| Error::invalid_config(format!("invalid distlock config: {why}"));
        let table: toml::Table = toml::from_str(text).map_err(|e| bad(one_line(&e.to_string())))?;
        Config::from_table(table).map_err(|e| bad(e.message().to_owned()))
    }

    /// The config a parsed TOML table gives, then validated.
    fn from_table(table: toml::Table) -> Result<Self> {
        let mut config = Config::default();
        config.set_keys("", table)?;
        config.validate()?;
        Ok(config)
    }

    /// Sets each key of `table`, its name prefixed by `prefix` (a nested
    /// `[tls]` table's `ca` is the setting `tls.ca`).
    fn set_keys(&mut self, prefix: &str, table: toml::Table) -> Result<()> {
        for (key, value) in table {
            let name = format!("{prefix}{key}");
            let text = match value {
                toml::Value::Table(inner) => {
                    self.set_keys(&format!("{name}."), inner)?;
                    continue;
                }
                toml::Value::String(text) => text,
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(Error::invalid_config(format!(
                        "{name}: a {} is no setting's value; write a string, number or boolean",
                        other.type_str()
                    )));
                }
            };
            match name.as_str() {
                "url" => self.url = Some(text),
                _ => self.set(&name, &text)?,
            }
        }
        Ok(())
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

    /// Reads the `DISTLOCK_*` environment variables ([`env_vars`]); unset or
    /// empty ones stay `None`.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// As [`from_env`](Self::from_env), reading variables through `lookup`.
    /// A bad value is `InvalidConfig`, naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |key: &str| lookup(key).filter(|v| !v.trim().is_empty());
        let mut config = Config {
            url: get(URL_ENV),
            ..Config::default()
        };
        for spec in SETTINGS {
            let Some(value) = get(spec.env) else {
                continue;
            };
            config
                .set(spec.name, &value)
                .and_then(|()| config.validate())
                .map_err(|e| Error::invalid_config(format!("{}: {}", spec.env, e.message())))?;
        }
        Ok(config)
    }

    /// Sets the setting `name` (one of [`SETTINGS`](distlock_core::raw::SETTINGS))
    /// from its text, as an environment variable or a URL option writes it.
    /// An unknown name or a bad value is `InvalidConfig`; a backend's own
    /// setting is parsed by the backend, on connect.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        self.settings.set(name, value)
    }

    /// `self`, with every setting that `over` sets taken from `over`.
    pub fn overlay(self, over: Config) -> Config {
        Config {
            url: over.url.or(self.url),
            settings: self.settings.overlay(over.settings),
            overrides: self.overrides.overlay(over.overrides),
        }
    }

    /// Rejects zero TTLs and timeouts.
    pub fn validate(&self) -> Result<()> {
        for settings in [&self.settings, &self.overrides] {
            if let Some(ttl) = settings.ttl {
                check_ttl(ttl)?;
            }
            for (what, value) in [
                ("connect timeout", settings.connect_timeout),
                ("request timeout", settings.request_timeout),
            ] {
                if value.is_some_and(|d| d.is_zero()) {
                    return Err(Error::invalid_config(format!(
                        "the {what} must be greater than zero"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The settings every backend applies over its URL (each refuses those
    /// it has no use for): [`settings`](Self::settings) but those the URL
    /// sets itself, then [`overrides`](Self::overrides).
    pub fn settings(&self) -> Settings {
        let mut under = self.settings.clone();
        for name in url_setting_names(&self.effective_url()) {
            unset(&mut under, name);
        }
        under.overlay(self.overrides.clone())
    }

    /// The URL to connect to: the configured one, else the embedded default
    /// (`file://` in [`distlock_file::FileConfig::default_dir`]).
    pub fn effective_url(&self) -> String {
        self.url.clone().unwrap_or_else(default_url)
    }

    /// The effective URL with any password masked, for messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.effective_url())
    }
}

/// The settings `url` gives itself: its options (by any spelling), its
/// credentials, and its path where that is the prefix (etcd, ZooKeeper).
fn url_setting_names(url: &str) -> Vec<&'static str> {
    let Ok(parts) = UrlParts::parse(url) else {
        return Vec::new();
    };
    let mut names: Vec<&'static str> = parts
        .query
        .iter()
        .filter_map(|(option, _)| setting_of_url_option(option).map(|spec| spec.name))
        .collect();
    if parts
        .username
        .as_deref()
        .is_some_and(|user| !user.is_empty())
    {
        names.push("username");
    }
    if parts.password.is_some() {
        names.push("password");
    }
    let path_is_prefix = matches!(parts.scheme.as_str(), "etcd" | "etcds" | "zk");
    if path_is_prefix && !parts.path.trim_matches('/').is_empty() {
        names.push("prefix");
    }
    if parts.fragment == Some("insecure") {
        names.push("tls_insecure");
    }
    names
}

/// Clears the setting `name` of `settings`.
fn unset(settings: &mut Settings, name: &str) {
    match name {
        "ttl" => settings.ttl = None,
        "connect_timeout" => settings.connect_timeout = None,
        "request_timeout" => settings.request_timeout = None,
        "username" => settings.username = None,
        "password" => settings.password = None,
        "prefix" => settings.prefix = None,
        "holder" => settings.holder = None,
        other => settings.options.retain(|(option, _)| option != other),
    }
}

/// The embedded default backend: lock files in the machine-wide `/var/tmp/distlock`.
pub fn default_url() -> String {
    distlock_file::FileConfig::new(distlock_file::FileConfig::default_dir()).to_url()
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
    use distlock_core::ErrorKind;
    use std::collections::HashMap;
    use std::time::Duration;

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
        assert_eq!(config.settings.ttl, Some(Duration::from_secs(15)));
        assert_eq!(
            config.settings.connect_timeout,
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            config.settings.request_timeout,
            Some(Duration::from_secs(2))
        );
        assert_eq!(config.settings.option("tls.ca"), Some("/ca.pem"));
        assert_eq!(config.settings.option("fsync"), Some("false"));
        let debug = format!("{config:?}");
        assert!(!debug.contains("pw1") && !debug.contains("pw2"), "{debug}");
    }

    /// Tools clear [`env_vars`] to run distlock in a clean environment (the
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
        let mut listed: Vec<String> = env_vars().map(str::to_owned).collect();
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
        let env = Config::from_lookup(|k| (k == "DISTLOCK_TTL").then(|| "9s".into())).unwrap();
        let merged = file.overlay(env);
        assert_eq!(merged.url.as_deref(), Some("memory://"));
        assert_eq!(merged.settings.ttl, Some(Duration::from_secs(9)));
        assert_eq!(merged.settings.prefix.as_deref(), Some("a"));
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
    fn backend_settings_reach_the_backends_as_named_options() {
        let config = Config::from_toml_str(
            "layout = \"curator\"\nfsync = false\nfair = false\nprefix = \"p\"\n[tls]\ncert = \"/c.pem\"",
        )
        .unwrap();
        let settings = config.settings();
        assert_eq!(settings.prefix.as_deref(), Some("p"));
        assert_eq!(settings.option("layout"), Some("curator"));
        assert_eq!(settings.option("fsync"), Some("false"));
        assert_eq!(settings.option("fair"), Some("false"));
        assert_eq!(settings.option("tls.cert"), Some("/c.pem"));
        assert_eq!(settings.option("tls.ca"), None);
    }

    #[test]
    fn unknown_tls_keys_are_refused_by_name() {
        let err = Config::from_toml_str("[tls]\nca_cert = \"/x\"").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("ca_cert"), "{err}");
    }

    #[test]
    fn default_url_is_the_file_backend() {
        assert!(Config::default().effective_url().starts_with("file:///"));
    }
}
