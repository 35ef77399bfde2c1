//! The URL forms `redis://`, `rediss://` and `redlock://h1,h2,h3`.
//!
//! Parsed by hand because a Redlock URL lists several hosts, which no URL
//! library accepts. Every error names the part that is wrong and shows the
//! URL with its password redacted.

use std::time::Duration;

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
    let shown = redact(url);
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
            let user = decode(user).map_err(|e| bad(format!("user name: {e}")))?;
            let pass = pass
                .map(decode)
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
            let value = decode(value.unwrap_or("")).map_err(|e| bad(format!("{key}: {e}")))?;
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
    if text.is_empty() {
        return Err("missing host; expected host[:port]".into());
    }
    let (host, port) = if let Some(inner) = text.strip_prefix('[') {
        let (host, after) = inner
            .split_once(']')
            .ok_or_else(|| format!("host {text:?} has '[' without ']'"))?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("unexpected {p:?} after host [{host}]"))?,
                ),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!("missing host in {text:?}"));
    }
    let port =
        match port {
            None => DEFAULT_PORT,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                format!("port {p:?} of host {host} is not a number from 1 to 65535")
            })?,
        };
    Ok(ServerAddr::new(host, port))
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

/// The URL with any password replaced by `<redacted>`, for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:<redacted>@{hosts}{tail}")
        }
        None => url.to_owned(),
    }
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

/// Percent-decodes `%XX` escapes (user names, passwords and option values).
fn decode(s: &str) -> std::result::Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent escapes do not form UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("redis://u:secret@h:1/0?x=1"),
            "redis://u:<redacted>@h:1/0?x=1"
        );
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn decode_handles_escapes_and_rejects_bad_ones() {
        assert_eq!(decode("a%40b%3Ac").unwrap(), "a@b:c");
        assert!(decode("a%4").is_err());
        assert!(decode("%zz").is_err());
    }
}
