//! Parsing `zk://` URLs into a [`ZkConfig`].
//!
//! The split into parts is distlock-core's [`UrlParts`], shared by every
//! backend; this module gives the parts their ZooKeeper meaning.

use distlock_core::raw::{UrlParts, parse_duration, percent_decode, redact_url, with_default_port};
use distlock_core::{Error, Result};

use crate::config::{DEFAULT_PORT, ZkConfig};

/// The URL scheme this backend answers to.
pub const SCHEME: &str = "zk";

const FORM: &str = "zk://[user:password@]host:port[,host:port...][/lock/root][?options]";

pub(crate) fn parse(url: &str) -> Result<ZkConfig> {
    let bad = |why: String| Error::invalid_config(format!("zk URL {}: {why}", redact_url(url)));
    let parts = UrlParts::parse(url).map_err(|why| bad(format!("{why}; expected {FORM}")))?;
    if parts.scheme != SCHEME {
        return Err(bad(format!(
            "scheme {:?} is not zk://; expected {FORM}",
            parts.scheme
        )));
    }
    if parts.fragment.is_some() {
        return Err(bad("a zk URL takes no #fragment".to_owned()));
    }
    let mut config = ZkConfig {
        servers: Vec::new(),
        ..ZkConfig::default()
    };
    match (parts.username, parts.password) {
        (None, _) => {}
        (Some(_), None) => {
            return Err(bad("credentials must be written user:password@".to_owned()));
        }
        (Some(user), Some(password)) => {
            config.username = Some(user);
            config.password = Some(password);
        }
    }
    if parts.hosts.is_empty() {
        return Err(bad("names no server".to_owned()));
    }
    for host in parts.hosts {
        config
            .servers
            .push(with_default_port(host, DEFAULT_PORT).map_err(&bad)?);
    }
    if !parts.path.is_empty() {
        config.prefix = percent_decode(parts.path).map_err(|e| bad(format!("path: {e}")))?;
    }
    for (key, value) in parts.query {
        apply_option(&mut config, &key, &value).map_err(&bad)?;
    }
    config.validate()?;
    Ok(config)
}

/// Applies the URL option or backend setting `key`.
pub(crate) fn apply_option(
    config: &mut ZkConfig,
    key: &str,
    value: &str,
) -> std::result::Result<(), String> {
    let duration = || parse_duration(value).map_err(|e| format!("option {key}: {e}"));
    match key {
        "ttl" | "session_timeout" => {
            let timeout = duration()?;
            *config = std::mem::take(config).with_session_timeout(timeout);
        }
        "connect_timeout" => config.connect_timeout = duration()?,
        "request_timeout" => config.request_timeout = duration()?,
        "username" => config.username = Some(value.to_owned()),
        "password" => config.password = Some(value.to_owned()),
        "holder" => config.holder = Some(value.to_owned()),
        "layout" => {
            config.layout = value.parse().map_err(|e: Error| e.message().to_owned())?;
        }
        other => {
            return Err(format!(
                "unknown option {other:?}; known: ttl, session_timeout, connect_timeout, \
                 request_timeout, username, password, layout, holder"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_core::ErrorKind;

    use super::*;
    use crate::NodeLayout;

    #[test]
    fn parses_hosts_root_credentials_and_options() {
        let config = ZkConfig::from_url(
            "zk://alice:p%40ss@h1:2181,h2,[::1]:2182/chroot/locks?session_timeout=2s&request_timeout=750ms",
        )
        .unwrap();
        assert_eq!(config.servers, ["h1:2181", "h2:2181", "[::1]:2182"]);
        assert_eq!(config.prefix, "/chroot/locks");
        assert_eq!(config.username.as_deref(), Some("alice"));
        assert_eq!(config.password.as_deref(), Some("p@ss"));
        assert_eq!(config.session_timeout, Duration::from_secs(2));
        assert_eq!(config.default_ttl, Duration::from_secs(2));
        assert_eq!(config.request_timeout, Duration::from_millis(750));
        let plain = ZkConfig::from_url("zk://localhost").unwrap();
        assert_eq!(plain.servers, ["localhost:2181"]);
        assert_eq!(plain.prefix, "/distlock");
        assert_eq!(plain.layout, NodeLayout::Distlock);
        let curator = ZkConfig::from_url("zk://h:2181?layout=curator").unwrap();
        assert_eq!(curator.layout, NodeLayout::Curator);
        assert_eq!(curator.servers, ["h:2181"]);
        let labelled = ZkConfig::from_url("zk://h?holder=billing%20worker").unwrap();
        assert_eq!(labelled.holder.as_deref(), Some("billing worker"));
    }

    #[test]
    fn malformed_urls_are_invalid_config_naming_the_problem() {
        let cases = [
            ("redis://h:1", "expected zk://"),
            ("zk:///locks", "no server"),
            ("zk://h1:notaport/x", "port"),
            ("zk://h1,,h2/x", "empty host"),
            ("zk://h1/a//b", "empty component"),
            ("zk://h1/x?session_timeout=soon", "option session_timeout"),
            ("zk://h1/x?ttl=0s", "greater than zero"),
            ("zk://h1/x?colour=red", "unknown option"),
            ("zk://alice@h1/x", "user:password"),
            ("zk://h1?layout=concurrency", "known: distlock, curator"),
            (
                "zk://h1/app?layout=curator",
                "does not apply with layout=curator",
            ),
        ];
        for (url, needle) in cases {
            let err = ZkConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}");
            assert!(err.message().contains(needle), "{url}: {err}");
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        for url in [
            "zk://alice:hunter2@h1:bad/x",
            "zk://h1:bad/x?username=alice&password=hunter2",
        ] {
            let err = ZkConfig::from_url(url).unwrap_err();
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }
}
