//! The URL forms `redis://`, `rediss://`, `redlock://h1,h2,h3` and
//! `redis+cluster://h1,h2,h3`.
//!
//! The split into parts is distlock-core's [`UrlParts`], shared by every
//! backend; this module checks the parts Redis gives meaning to. Every error
//! names the part that is wrong and shows the URL with its password redacted.

use std::time::Duration;

use distlock_core::raw::{UrlParts, parse_duration, parse_flag, redact_url, split_host_port};
use distlock_core::{Error, Result};

use crate::config::{DEFAULT_PORT, Layout, ServerAddr};

/// The options a Redis URL understands, for the unknown-option error.
const OPTIONS: &str = "ttl, connect_timeout, request_timeout, prefix, holder, tls, tls_insecure, tls.ca, tls.cert, tls.key, fair, layout";

/// A recognised `?key=value` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UrlOption {
    Prefix(String),
    Holder(String),
    DefaultTtl(Duration),
    ConnectTimeout(Duration),
    RequestTimeout(Duration),
    Tls(bool),
    TlsInsecure(bool),
    TlsCaFile(String),
    TlsCertFile(String),
    TlsKeyFile(String),
    Fair(bool),
    Layout(Layout),
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
    let parts = UrlParts::parse(url)
        .map_err(|why| bad(format!("{why}; expected {}://host:port", schemes[0])))?;
    if !schemes.contains(&parts.scheme.as_str()) {
        return Err(bad(format!(
            "unsupported scheme {:?}; expected one of {}",
            parts.scheme,
            schemes.join(", ")
        )));
    }
    let mut options = Vec::new();
    match parts.fragment {
        None | Some("") => {}
        Some("insecure") => options.push(UrlOption::TlsInsecure(true)),
        Some(other) => {
            return Err(bad(format!(
                "unknown fragment #{other}; only #insecure is understood"
            )));
        }
    }
    if parts.hosts.is_empty() {
        return Err(bad("no host".into()));
    }
    let hosts = parts
        .hosts
        .iter()
        .map(|h| parse_host(h).map_err(&bad))
        .collect::<Result<Vec<_>>>()?;
    let db = match parts.path.trim_matches('/') {
        "" => None,
        p => Some(
            p.parse::<i64>()
                .map_err(|_| bad(format!("database number {p:?} in the path is not a number")))?,
        ),
    };
    for (key, value) in parts.query {
        options.push(parse_option(&key, value).map_err(&bad)?);
    }
    Ok(ParsedUrl {
        hosts,
        username: parts.username.filter(|user| !user.is_empty()),
        password: parts.password,
        db,
        tls: parts.scheme.starts_with("rediss"),
        options,
    })
}

fn parse_host(text: &str) -> std::result::Result<ServerAddr, String> {
    let (host, port) = split_host_port(text)?;
    Ok(ServerAddr::new(host, port.unwrap_or(DEFAULT_PORT)))
}

/// The URL option or backend setting `key`.
pub(crate) fn parse_option(key: &str, value: String) -> std::result::Result<UrlOption, String> {
    let duration = |v: &str| parse_duration(v).map_err(|why| format!("option {key}: {why}"));
    let flag = |v: &str| parse_flag(key, v);
    Ok(match key {
        "prefix" => UrlOption::Prefix(value),
        "holder" => UrlOption::Holder(value),
        "ttl" => UrlOption::DefaultTtl(duration(&value)?),
        "connect_timeout" => UrlOption::ConnectTimeout(duration(&value)?),
        "request_timeout" => UrlOption::RequestTimeout(duration(&value)?),
        "tls" => UrlOption::Tls(flag(&value)?),
        "tls_insecure" => UrlOption::TlsInsecure(flag(&value)?),
        "tls.ca" => UrlOption::TlsCaFile(value),
        "tls.cert" => UrlOption::TlsCertFile(value),
        "tls.key" => UrlOption::TlsKeyFile(value),
        "fair" => UrlOption::Fair(flag(&value)?),
        "layout" => {
            UrlOption::Layout(Layout::parse(&value).map_err(|why| format!("option {why}"))?)
        }
        other => return Err(format!("unknown option {other:?}; known: {OPTIONS}")),
    })
}
