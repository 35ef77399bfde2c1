//! The URL forms `redis://`, `rediss://` and `redlock://h1,h2,h3`.
//!
//! Parsed by hand because a Redlock URL lists several hosts, which no URL
//! library accepts. Every error names the part that is wrong and shows the
//! URL with its password redacted.

use std::time::Duration;

use lock_core::raw::{percent_decode, redact_url, split_host_port};
use lock_core::{Error, Result};

use crate::config::{DEFAULT_PORT, ServerAddr};

/// A recognised `?key=value` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UrlOption {
    Prefix(String),
    DefaultTtl(Duration),
    ConnectTimeout(Duration),
    RequestTimeout(Duration),
    Tls(bool),
    TlsInsecure(bool),
    TlsCaFile(String),
}

/// The parts of a URL.
#[derive(Debug, Clone)]
pub(crate) struct ParsedUrl {
    pub(crate) hosts: Vec<ServerAddr>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: Option<i64>,
    pub(crate) tls: bool,
    pub(crate) options: Vec<UrlOption>,
}

/// Parses `url`, whose scheme must be one of `schemes`.
pub(crate) fn parse(url: &str, schemes: &[&str]) -> Result<ParsedUrl> {
    let shown = redact_url(url);
    let bad = |what: String| Error::invalid_config(format!("redis URL {shown}: {what}"));
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad(format!(
            "no scheme; expected {}://host:port",
            schemes[0]
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !schemes.contains(&scheme.as_str()) {
        return Err(bad(format!(
            "unsupported scheme {scheme:?}; expected one of {}",
            schemes.join(", ")
        )));
    }
    let mut options = Vec::new();
    let (rest, fragment) = split_last(rest, '#');
    match fragment {
        None | Some("") => {}
        Some("insecure") => options.push(UrlOption::TlsInsecure(true)),
        Some(other) => {
            return Err(bad(format!(
                "unknown fragment #{other}; only #insecure is understood"
            )));
        }
    }
    let (rest, query) = split_first(rest, '?');
    let (authority, path) = split_first(rest, '/');
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(info) => {
            let (user, pass) = split_first(info, ':');
            let user = percent_decode(user).map_err(|e| bad(format!("user name: {e}")))?;
            let pass = pass
                .map(percent_decode)
                .transpose()
                .map_err(|e| bad(format!("password: {e}")))?;
            ((!user.is_empty()).then_some(user), pass)
        }
    };
    let hosts = hosts
        .split(',')
        .map(|h| parse_host(h).map_err(&bad))
        .collect::<Result<Vec<_>>>()?;
    let db = match path.map(|p| p.trim_matches('/')) {
        None | Some("") => None,
        Some(p) => Some(
            p.parse::<i64>()
                .map_err(|_| bad(format!("database number {p:?} in the path is not a number")))?,
        ),
    };
    if let Some(query) = query {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = split_first(pair, '=');
            let value =
                percent_decode(value.unwrap_or("")).map_err(|e| bad(format!("{key}: {e}")))?;
            options.push(parse_option(key, value).map_err(&bad)?);
        }
    }
    Ok(ParsedUrl {
        hosts,
        username,
        password,
        db,
        tls: scheme == "rediss",
        options,
    })
}

fn parse_host(text: &str) -> std::result::Result<ServerAddr, String> {
    let (host, port) = split_host_port(text)?;
    Ok(ServerAddr::new(host, port.unwrap_or(DEFAULT_PORT)))
}

fn parse_option(key: &str, value: String) -> std::result::Result<UrlOption, String> {
    let millis = |v: &str| {
        v.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("{key}={v:?} is not a whole number of milliseconds"))
    };
    let flag = |v: &str| match v {
        "" | "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(format!("{key}={v:?} is not true or false")),
    };
    Ok(match key {
        "prefix" => UrlOption::Prefix(value),
        "default_ttl_ms" => {
            let ttl = millis(&value)?;
            if ttl.is_zero() {
                return Err("default_ttl_ms=0: the TTL must be greater than zero".into());
            }
            UrlOption::DefaultTtl(ttl)
        }
        "connect_timeout_ms" => UrlOption::ConnectTimeout(millis(&value)?),
        "request_timeout_ms" => UrlOption::RequestTimeout(millis(&value)?),
        "tls" => UrlOption::Tls(flag(&value)?),
        "tls_insecure" => UrlOption::TlsInsecure(flag(&value)?),
        "tls_ca_file" => UrlOption::TlsCaFile(value),
        other => {
            return Err(format!(
                "unknown option {other:?}; known: prefix, default_ttl_ms, connect_timeout_ms, request_timeout_ms, tls, tls_insecure, tls_ca_file"
            ));
        }
    })
}

fn split_first(s: &str, c: char) -> (&str, Option<&str>) {
    match s.split_once(c) {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    }
}

fn split_last(s: &str, c: char) -> (&str, Option<&str>) {
    match s.rsplit_once(c) {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    }
}
