//! Small parsing helpers shared by the backends' URL and config parsers.
//!
//! Plain `std` code: splitting a URL into its parts, percent-decoding,
//! `host[:port]` splitting (with `[v6]` brackets) and password redaction. Errors are
//! `String`s naming what is wrong; callers wrap them into
//! [`Error::invalid_config`](crate::Error::invalid_config) with their context.

/// Percent-decodes `%XX` escapes (user names, passwords, paths, option values).
///
/// The error names the byte offset of a bad escape, never the text itself
/// (it may be a password).
///
/// ```
/// assert_eq!(distlock_core::raw::percent_decode("p%40ss").unwrap(), "p@ss");
/// assert!(distlock_core::raw::percent_decode("%zz").is_err());
/// ```
pub fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent escapes do not decode to UTF-8".to_owned())
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port` into the host (without
/// brackets) and the port, if one is written.
///
/// Rejects an empty host, whitespace, `/` or `@`, an unclosed `[`, an IPv6
/// address without brackets and a port outside 1..=65535.
///
/// ```
/// use distlock_core::raw::split_host_port;
/// assert_eq!(split_host_port("h:1").unwrap(), ("h", Some(1)));
/// assert_eq!(split_host_port("[::1]").unwrap(), ("::1", None));
/// assert!(split_host_port("h:0").is_err());
/// ```
pub fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    if text.is_empty() {
        return Err("empty host; expected host[:port]".into());
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err(format!("host {text:?} contains a space, '/' or '@'"));
    }
    let (host, port) = if let Some(inner) = text.strip_prefix('[') {
        let (host, after) = inner
            .split_once(']')
            .ok_or_else(|| format!("host {text:?} has '[' without ']'"))?;
        match after {
            "" => (host, None),
            rest => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("unexpected {rest:?} after host [{host}]")),
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err(format!(
                    "host {text:?} looks like an IPv6 address; write it in brackets: [addr]:port"
                ));
            }
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!("empty host in {text:?}"));
    }
    let port = match port {
        None => None,
        Some(port) => Some(
            port.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    format!("port {port:?} of host {host} is not a number from 1 to 65535")
                })?,
        ),
    };
    Ok((host, port))
}

/// `host:port` as written in an endpoint list, with brackets around an IPv6
/// host: `[::1]:2379`.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Checks `host[:port]` (see [`split_host_port`]) and writes it back as
/// `host:port`, adding `default_port` when none is written.
///
/// ```
/// use distlock_core::raw::with_default_port;
/// assert_eq!(with_default_port("h", 2181).unwrap(), "h:2181");
/// assert_eq!(with_default_port("[::1]:7", 2181).unwrap(), "[::1]:7");
/// ```
pub fn with_default_port(text: &str, default_port: u16) -> Result<String, String> {
    let (host, port) = split_host_port(text)?;
    Ok(join_host_port(host, port.unwrap_or(default_port)))
}

/// A backend URL split into its parts:
/// `scheme://[user[:password]@]host[:port][,host[:port]...][/path][?key=value&...][#fragment]`.
///
/// Every backend's URL form is this shape, and several list more than one
/// host, which general URL libraries refuse; so the split is done once, here.
/// User name, password and query keys and values are percent-decoded; the
/// hosts and the path are left as written, for the backend to check.
///
/// ```
/// use distlock_core::raw::UrlParts;
/// let url = UrlParts::parse("zk://app:p%40ss@a:2181,b/jobs?ttl=5s#x").unwrap();
/// assert_eq!(url.scheme, "zk");
/// assert_eq!((url.username.as_deref(), url.password.as_deref()), (Some("app"), Some("p@ss")));
/// assert_eq!(url.hosts, ["a:2181", "b"]);
/// assert_eq!(url.path, "/jobs");
/// assert_eq!(url.query, [("ttl".to_owned(), "5s".to_owned())]);
/// assert_eq!(url.fragment, Some("x"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// The scheme, lower-cased.
    pub scheme: String,
    /// The user name, if the URL has user info (possibly empty: `:pw@`).
    pub username: Option<String>,
    /// The password, if the user info has a `:`.
    pub password: Option<String>,
    /// The comma-separated hosts as written (`host`, `host:port`, `[v6]:port`);
    /// empty when the authority is (`file:///dir`).
    pub hosts: Vec<&'a str>,
    /// Everything from the `/` after the authority up to `?` or `#`, or `""`.
    pub path: &'a str,
    /// The `?key=value` options in order; a key without `=` has an empty value.
    pub query: Vec<(String, String)>,
    /// The text after the last `#`, if any.
    pub fragment: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    /// Splits `url`. The error names the part that is wrong, never the password.
    pub fn parse(url: &'a str) -> Result<Self, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| "no scheme (expected scheme://...)".to_owned())?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(format!("bad scheme {scheme:?}"));
        }
        let (rest, fragment) = match rest.rsplit_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (info, None),
                };
                let user = percent_decode(user).map_err(|why| format!("user name: {why}"))?;
                let password = password
                    .map(percent_decode)
                    .transpose()
                    .map_err(|why| format!("password: {why}"))?;
                (Some(user), password)
            }
        };
        let hosts = if hosts.is_empty() {
            Vec::new()
        } else {
            hosts.split(',').collect()
        };
        let mut options = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(key).map_err(|why| format!("option name: {why}"))?;
            let value = percent_decode(value).map_err(|why| format!("option {key}: {why}"))?;
            options.push((key, value));
        }
        Ok(UrlParts {
            scheme: scheme.to_ascii_lowercase(),
            username,
            password,
            hosts,
            path,
            query: options,
            fragment,
        })
    }
}

/// `url` with any password replaced by `***` (`redis://user:***@host`), for
/// messages and logs; a `password=` query option is hidden too.
///
/// Works on URLs that do not parse (several hosts, no scheme): whatever sits
/// between `//` (or the start) and the last `@` before the path is user info.
///
/// ```
/// use distlock_core::raw::redact_url;
/// assert_eq!(redact_url("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(redact_url("zk://h/x?password=pw&a=1"), "zk://h/x?password=***&a=1");
/// assert_eq!(redact_url("etcd://a:2379"), "etcd://a:2379");
/// ```
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..authority_end];
    let mut shown = match authority.rfind('@') {
        None => url.to_owned(),
        Some(at) => {
            let userinfo = &authority[..at];
            let user = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => userinfo.to_owned(),
            };
            format!("{}{}@{}", &url[..start], user, &url[start + at + 1..])
        }
    };
    if let Some(q) = shown.find('?') {
        let mut query_start = q + 1;
        while query_start <= shown.len() {
            let end = shown[query_start..]
                .find(['&', '#'])
                .map_or(shown.len(), |e| query_start + e);
            if shown[query_start..end].starts_with("password=") {
                shown.replace_range(query_start + "password=".len()..end, "***");
            }
            let end = shown[query_start..]
                .find(['&', '#'])
                .map_or(shown.len(), |e| query_start + e);
            if !shown[end..].starts_with('&') {
                break;
            }
            query_start = end + 1;
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decode_handles_escapes_and_rejects_bad_ones() {
        assert_eq!(percent_decode("a%40b%3Ac").unwrap(), "a@b:c");
        assert_eq!(percent_decode("plain").unwrap(), "plain");
        assert_eq!(percent_decode("%C3%A9").unwrap(), "é");
        for bad in ["a%4", "%zz", "%+1", "%", "%é"] {
            let err = percent_decode(bad).unwrap_err();
            assert!(err.contains("percent escape"), "{bad}: {err}");
        }
        assert!(percent_decode("%FF").unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn host_port_splits_with_and_without_brackets() {
        assert_eq!(split_host_port("h").unwrap(), ("h", None));
        assert_eq!(split_host_port("h:2379").unwrap(), ("h", Some(2379)));
        assert_eq!(split_host_port("[::1]").unwrap(), ("::1", None));
        assert_eq!(split_host_port("[::1]:7000").unwrap(), ("::1", Some(7000)));
        assert_eq!(with_default_port("h", 2181).unwrap(), "h:2181");
        assert_eq!(with_default_port("h:1", 2181).unwrap(), "h:1");
        assert_eq!(with_default_port("[::1]", 2181).unwrap(), "[::1]:2181");
        assert_eq!(join_host_port("::1", 1), "[::1]:1");
    }

    #[test]
    fn bad_hosts_name_the_problem() {
        for (text, needle) in [
            ("", "empty host"),
            (":1", "empty host"),
            ("[]:1", "empty host"),
            ("h:notaport", "port"),
            ("h:99999", "port"),
            ("h:0", "port"),
            ("h:", "port"),
            ("[::1", "without ']'"),
            ("[::1]x", "unexpected"),
            ("::1", "brackets"),
            ("a b", "space"),
            ("a/b", "'/'"),
        ] {
            let err = split_host_port(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn url_parts_split_every_form() {
        let url = UrlParts::parse("file:///var/locks?fsync=false").unwrap();
        assert!(url.hosts.is_empty() && url.username.is_none());
        assert_eq!((url.path, url.query.len()), ("/var/locks", 1));
        let url = UrlParts::parse("REDLOCK://:pw@a:1,b:2,[::1]:3").unwrap();
        assert_eq!(url.scheme, "redlock");
        assert_eq!(
            (url.username.as_deref(), url.password.as_deref()),
            (Some(""), Some("pw"))
        );
        assert_eq!(url.hosts, ["a:1", "b:2", "[::1]:3"]);
        let url = UrlParts::parse("memory://name").unwrap();
        assert_eq!((url.hosts.as_slice(), url.path), (&["name"][..], ""));
        let url = UrlParts::parse("etcd://h?flag&ttl=1%30s").unwrap();
        assert_eq!(
            url.query,
            [("flag".into(), "".into()), ("ttl".into(), "10s".into())]
        );
    }

    #[test]
    fn bad_urls_name_the_part_and_hide_the_password() {
        for (url, needle) in [
            ("h:2379", "no scheme"),
            ("://h", "bad scheme"),
            ("re dis://h", "bad scheme"),
            ("redis://u:%zz@h", "password"),
            ("redis://h?ttl=%zz", "option ttl"),
        ] {
            let err = UrlParts::parse(url).unwrap_err();
            assert!(err.contains(needle), "{url}: {err}");
            assert!(!err.contains("%zz"), "{url}: {err}");
        }
    }

    #[test]
    fn redaction_hides_only_passwords() {
        assert_eq!(
            redact_url("redis://u:secret@h:1/0?x=1"),
            "redis://u:***@h:1/0?x=1"
        );
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact_url("redlock://:pw@a:1,b:2"),
            "redlock://:***@a:1,b:2"
        );
        assert_eq!(redact_url("u:pw@h:1"), "u:***@h:1");
        assert_eq!(redact_url("memory://"), "memory://");
        assert_eq!(redact_url("file:///tmp/x@y"), "file:///tmp/x@y");
        assert_eq!(
            redact_url("zk://h/x?username=a&password=hunter2"),
            "zk://h/x?username=a&password=***"
        );
        assert_eq!(
            redact_url("zk://h/x?password=pw#frag"),
            "zk://h/x?password=***#frag"
        );
        for url in [
            "etcd://u:p@ss:w@h:1",
            "zk://u:pw@a:1,b:2/chroot",
            "rediss://:pw@h:1/0?x=1",
        ] {
            let shown = redact_url(url);
            assert!(
                !shown.contains("pw") && !shown.contains("ss:w"),
                "{url} -> {shown}"
            );
        }
    }
}
