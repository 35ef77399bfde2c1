//! Parsing `zk://` URLs into a [`ZkConfig`].
//!
//! The `url` crate cannot parse a comma-separated host list with ports, so
//! the authority is split by hand; the query uses its form decoder.

use lock_core::raw::{percent_decode, redact_url, with_default_port};
use lock_core::{Error, Result};

use crate::config::{DEFAULT_PORT, ZkConfig};
use crate::durations;

/// The URL scheme this backend answers to.
pub const SCHEME: &str = "zk";

pub(crate) fn parse(url: &str) -> Result<ZkConfig> {
    let bad = |why: String| Error::invalid_config(format!("zk URL {}: {why}", redact_url(url)));
    let rest = url
        .strip_prefix("zk://")
        .ok_or_else(|| bad("expected zk://host:port[,host:port...]/lock/root".to_owned()))?;
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let mut config = ZkConfig {
        servers: Vec::new(),
        ..ZkConfig::default()
    };
    if let Some(userinfo) = userinfo {
        let (user, password) = userinfo
            .split_once(':')
            .ok_or_else(|| bad("credentials must be written user:password@".to_owned()))?;
        config.username = Some(percent_decode(user).map_err(|e| bad(format!("user name: {e}")))?);
        config.password =
            Some(percent_decode(password).map_err(|e| bad(format!("password: {e}")))?);
    }
    if hosts.is_empty() {
        return Err(bad("names no server".to_owned()));
    }
    for host in hosts.split(',') {
        config
            .servers
            .push(with_default_port(host, DEFAULT_PORT).map_err(&bad)?);
    }
    if !path.is_empty() {
        config.prefix = percent_decode(path).map_err(|e| bad(format!("path: {e}")))?;
    }
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let duration = || durations::parse(&value).map_err(|e| bad(format!("{key}: {e}")));
        match key.as_ref() {
            "session_timeout" | "ttl" | "default_ttl" => {
                let timeout = duration()?;
                config = config.with_session_timeout(timeout);
            }
            "connect_timeout" => config.connect_timeout = duration()?,
            "request_timeout" => config.request_timeout = duration()?,
            "username" => config.username = Some(value.into_owned()),
            "password" => config.password = Some(value.into_owned()),
            "layout" => {
                config.layout = value
                    .parse()
                    .map_err(|e: Error| bad(e.message().to_owned()))?;
            }
            other => {
                return Err(bad(format!(
                    "unknown option {other:?}; known: session_timeout, ttl, connect_timeout, \
                     request_timeout, username, password, layout"
                )));
            }
        }
    }
    config.settings()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lock_core::ErrorKind;

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
    }

    #[test]
    fn malformed_urls_are_invalid_config_naming_the_problem() {
        let cases = [
            ("redis://h:1", "expected zk://"),
            ("zk:///locks", "no server"),
            ("zk://h1:notaport/x", "port"),
            ("zk://h1,,h2/x", "empty host"),
            ("zk://h1/a//b", "empty component"),
            ("zk://h1/x?session_timeout=2", "no unit"),
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
