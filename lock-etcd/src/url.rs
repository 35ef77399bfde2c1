//! The URL form of a configuration:
//! `etcd://[user:password@]h1:2379,h2:2379[/prefix][?options]`.
//!
//! The split into parts is distlock-core's [`UrlParts`], shared by every
//! backend; this module gives the parts their etcd meaning.

use distlock_core::raw::{
    UrlParts, parse_duration, percent_decode, redact_url, split_host_port, with_default_port,
};
use distlock_core::{Error, Result};

use crate::config::{DEFAULT_PREFIX, EtcdConfig};

/// The port used when an endpoint in a URL has none.
const DEFAULT_PORT: u16 = 2379;

const FORM: &str = "etcd://[user:password@]host:port[,host:port...][/prefix][?options]";

pub(crate) fn parse(url: &str) -> Result<EtcdConfig> {
    let bad = |why: String| {
        Error::invalid_config(format!(
            "malformed etcd URL {:?}: {why}; expected {FORM}",
            redact_url(url)
        ))
    };
    let parts = UrlParts::parse(url).map_err(&bad)?;
    let tls = match parts.scheme.as_str() {
        "etcd" => false,
        "etcds" => true,
        other => return Err(bad(format!("scheme {other:?} is not etcd:// or etcds://"))),
    };
    if parts.fragment.is_some() {
        return Err(bad("an etcd URL takes no #fragment".into()));
    }
    if parts.hosts.is_empty() {
        return Err(bad("no host".into()));
    }
    let mut endpoints = Vec::new();
    for host in &parts.hosts {
        endpoints.push(with_default_port(host, DEFAULT_PORT).map_err(&bad)?);
    }
    let mut config = EtcdConfig::new(endpoints);
    config.tls = tls;
    match (parts.username, parts.password) {
        (None, _) => {}
        (Some(_), None) => {
            return Err(bad("user given without a password (user:password@)".into()));
        }
        (Some(user), Some(_)) if user.is_empty() => return Err(bad("empty user name".into())),
        (Some(user), Some(password)) => {
            config.username = Some(user);
            config.password = Some(password);
        }
    }
    let prefix = percent_decode(parts.path.trim_end_matches('/'))
        .map_err(|why| bad(format!("prefix: {why}")))?;
    config.prefix = if prefix.is_empty() {
        DEFAULT_PREFIX.to_owned()
    } else {
        prefix
    };
    for (key, value) in parts.query {
        apply_option(&mut config, &key, &value).map_err(&bad)?;
    }
    config.validate().map_err(|e| {
        Error::invalid_config(format!("etcd URL {:?}: {}", redact_url(url), e.message()))
    })?;
    Ok(config)
}

/// The URL options, for the unknown-option error.
const OPTIONS: &str = "ttl, connect_timeout, request_timeout, keepalive_interval, tls.ca, \
                       tls.cert, tls.key, layout, holder";

/// Applies the URL option or backend setting `key`.
pub(crate) fn apply_option(
    config: &mut EtcdConfig,
    key: &str,
    value: &str,
) -> std::result::Result<(), String> {
    let duration = || parse_duration(value).map_err(|why| format!("option {key}={value:?}: {why}"));
    match key {
        "ttl" => config.default_ttl = duration()?,
        "connect_timeout" => config.connect_timeout = duration()?,
        "request_timeout" => config.request_timeout = duration()?,
        "keepalive_interval" => config.keepalive_interval = Some(duration()?),
        name if config.tls_files.set(name, value) => {}
        "holder" => config.holder = Some(value.to_owned()),
        "layout" => {
            config.layout = value
                .parse()
                .map_err(|e: Error| format!("option layout: {}", e.message()))?;
        }
        other => return Err(format!("unknown option {other:?}; known: {OPTIONS}")),
    }
    Ok(())
}

/// Checks one configured endpoint: `host:port` or `http(s)://host:port`.
pub(crate) fn check_endpoint(endpoint: &str) -> Result<()> {
    let bare = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint)
        .trim_end_matches('/');
    let (host, port) = split_host_port(bare)
        .map_err(|why| Error::invalid_config(format!("etcd endpoint {endpoint:?}: {why}")))?;
    if port.is_none() {
        return Err(Error::invalid_config(format!(
            "etcd endpoint {endpoint:?} has no port; write {}",
            distlock_core::raw::join_host_port(host, DEFAULT_PORT)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn cluster_url_with_prefix_credentials_and_options_parses() {
        let config = EtcdConfig::from_url(
            "etcd://root:p%40ss@h1:2379,h2,[::1]:2380/my/locks/?ttl=3s&request_timeout=250ms",
        )
        .unwrap();
        assert_eq!(config.endpoints, ["h1:2379", "h2:2379", "[::1]:2380"]);
        assert_eq!(config.prefix, "/my/locks");
        assert_eq!(config.username.as_deref(), Some("root"));
        assert_eq!(config.password.as_deref(), Some("p@ss"));
        assert_eq!(config.default_ttl, Duration::from_secs(3));
        assert_eq!(config.request_timeout, Duration::from_millis(250));
        assert!(!config.uses_tls());
    }

    #[test]
    fn etcds_needs_a_ca_and_takes_paths_from_options() {
        let err = EtcdConfig::from_url("etcds://h:2379").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("tls.ca"), "{err}");
        let config = EtcdConfig::from_url(
            "etcds://h:2379?tls.ca=/etc/ca.pem&tls.cert=/c.pem&tls.key=/k.pem",
        )
        .unwrap();
        assert!(config.uses_tls());
        assert_eq!(
            config.tls_files.key.as_deref(),
            Some(std::path::Path::new("/k.pem"))
        );
        let err = EtcdConfig::from_url("etcds://h:2379?ca_cert=/etc/ca.pem").unwrap_err();
        assert!(
            err.message().contains("ca_cert"),
            "an unknown option: {err}"
        );
    }

    #[test]
    fn holder_option_sets_the_description_percent_decoded() {
        let config =
            EtcdConfig::from_url("etcd://h:2379?holder=distlock%20run%20backup%40web-1").unwrap();
        assert_eq!(config.holder.as_deref(), Some("distlock run backup@web-1"));
        assert_eq!(EtcdConfig::from_url("etcd://h:2379").unwrap().holder, None);
        let err = EtcdConfig::from_url("etcd://h:2379?holder=").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn plain_url_takes_the_default_prefix() {
        let config = EtcdConfig::from_url("etcd://localhost").unwrap();
        assert_eq!(config.endpoints, ["localhost:2379"]);
        assert_eq!(config.prefix, DEFAULT_PREFIX);
    }

    #[test]
    fn layout_option_selects_the_key_layout() {
        use crate::KeyLayout;
        let config = EtcdConfig::from_url("etcd://h:2379?layout=concurrency").unwrap();
        assert_eq!(config.layout, KeyLayout::Concurrency);
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        let plain = EtcdConfig::from_url("etcd://h:2379?layout=distlock").unwrap();
        assert_eq!(plain.layout, KeyLayout::Distlock);
        assert_eq!(
            EtcdConfig::from_url("etcd://h:2379").unwrap().layout,
            KeyLayout::Distlock
        );
        let err = EtcdConfig::from_url("etcd://h:2379?layout=curator").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.message().contains("\"curator\"")
                && err.message().contains("known: distlock, concurrency"),
            "{err}"
        );
        let err = EtcdConfig::from_url("etcd://h:2379/app?layout=concurrency").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("/app"), "{err}");
    }

    #[test]
    fn malformed_urls_are_invalid_config_and_hide_the_password() {
        for bad in [
            "h1:2379",
            "redis://h:6379",
            "etcd://",
            "etcd://h1:2379,,h2:2379",
            "etcd://h1:99999",
            "etcd://h1:port",
            "etcd://h1?ttl=0s",
            "etcd://h1?ttl=3 fortnights",
            "etcd://h1?colour=blue",
            "etcd://user@h1",
            "etcd://user:secret@h1?ttl=x",
        ] {
            let err = EtcdConfig::from_url(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
