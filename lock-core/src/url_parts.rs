//! Small parsing helpers shared by the backends' URL and config parsers.
//!
//! Plain `std` code: percent-decoding of URL parts, `host[:port]` splitting
//! (with `[v6]` brackets), humane durations and password redaction. Errors are
//! `String`s naming what is wrong; callers wrap them into
//! [`Error::invalid_config`](crate::Error::invalid_config) with their context.

use std::time::Duration;

/// Percent-decodes `%XX` escapes (user names, passwords, paths, option values).
///
/// The error names the byte offset of a bad escape, never the text itself
/// (it may be a password).
///
/// ```
/// assert_eq!(lock_core::raw::percent_decode("p%40ss").unwrap(), "p@ss");
/// assert!(lock_core::raw::percent_decode("%zz").is_err());
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
/// use lock_core::raw::split_host_port;
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
/// use lock_core::raw::with_default_port;
/// assert_eq!(with_default_port("h", 2181).unwrap(), "h:2181");
/// assert_eq!(with_default_port("[::1]:7", 2181).unwrap(), "[::1]:7");
/// ```
pub fn with_default_port(text: &str, default_port: u16) -> Result<String, String> {
    let (host, port) = split_host_port(text)?;
    Ok(join_host_port(host, port.unwrap_or(default_port)))
}

const DURATION_FORMS: &str = "use forms like 500ms, 10s, 2m, 1h30m or 1.5s";

/// Parses a humane duration such as `500ms`, `10s`, `2m`, `1h30m`, `1.5s` or
/// `10` (a bare number is seconds).
///
/// Units: `ns`, `us`/`µs`, `ms`, `s`/`sec`/`secs`, `m`/`min`/`mins`,
/// `h`/`hr`/`hours`, `d`/`days`. Decimal fractions are exact (no floating
/// point). The error quotes the input and says what is wrong.
///
/// ```
/// use std::time::Duration;
/// use lock_core::raw::parse_duration;
/// assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
/// assert!(parse_duration("ten seconds").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {text:?}: {why}; {DURATION_FORMS}");
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    if s.chars().all(is_number) {
        return nanos(s, NANOS_PER_SEC)
            .and_then(to_duration)
            .map_err(|why| bad(&why));
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !is_number(c))
            .ok_or_else(|| bad("a number needs a unit (ms, s, m, h)"))?;
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let number = &rest[..digits];
        rest = &rest[digits..];
        let unit_len = rest.find(is_number).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" | "sec" | "secs" => NANOS_PER_SEC,
            "m" | "min" | "mins" => 60 * NANOS_PER_SEC,
            "h" | "hr" | "hours" => 3_600 * NANOS_PER_SEC,
            "d" | "days" => 86_400 * NANOS_PER_SEC,
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        total = total
            .checked_add(nanos(number, scale).map_err(|why| bad(&why))?)
            .ok_or_else(|| bad("out of range"))?;
        rest = &rest[unit_len..];
    }
    to_duration(total).map_err(|why| bad(&why))
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// `number` (digits with at most one `.`) times `scale` nanoseconds, exactly
/// (fractions of a nanosecond are dropped).
fn nanos(number: &str, scale: u128) -> Result<u128, String> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!("bad number {number:?}"));
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| "out of range".to_owned())?
    };
    // Digits beyond 18 are far below a nanosecond for every unit.
    let frac = &frac[..frac.len().min(18)];
    let frac_nanos = if frac.is_empty() {
        0
    } else {
        let digits: u128 = frac.parse().map_err(|_| format!("bad number {number:?}"))?;
        digits * scale / 10u128.pow(frac.len() as u32)
    };
    whole
        .checked_mul(scale)
        .and_then(|n| n.checked_add(frac_nanos))
        .ok_or_else(|| "out of range".to_owned())
}

fn to_duration(nanos: u128) -> Result<Duration, String> {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| "out of range".to_owned())?;
    Ok(Duration::new(secs, (nanos % NANOS_PER_SEC) as u32))
}

/// Formats a duration the way [`parse_duration`] reads it back: whole
/// seconds as `3s`, whole milliseconds as `1500ms`, otherwise microseconds.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}us", d.as_micros())
    } else if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format!("{}s", d.as_secs())
    }
}

/// `url` with any password replaced by `***` (`redis://user:***@host`), for
/// messages and logs; a `password=` query option is hidden too.
///
/// Works on URLs that do not parse (several hosts, no scheme): whatever sits
/// between `//` (or the start) and the last `@` before the path is user info.
///
/// ```
/// use lock_core::raw::redact_url;
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
    fn humane_durations_parse() {
        for (text, want) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.1s", Duration::from_millis(100)),
            (".5s", Duration::from_millis(500)),
            ("0", Duration::ZERO),
            ("3", Duration::from_secs(3)),
            ("2.5", Duration::from_millis(2500)),
            (" 250ms ", Duration::from_millis(250)),
            ("750us", Duration::from_micros(750)),
            ("7ns", Duration::from_nanos(7)),
            ("1d", Duration::from_secs(86_400)),
        ] {
            assert_eq!(parse_duration(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn bad_durations_quote_the_input_and_name_the_problem() {
        for (text, needle) in [
            ("", "empty"),
            ("s", "expected a number"),
            ("10x", "unknown unit"),
            ("-1s", "expected a number"),
            ("1.2.3s", "bad number"),
            ("ms10", "expected a number"),
            ("NaN", "expected a number"),
            ("3 hours", "unknown unit"),
            ("10s5", "needs a unit"),
            ("99999999999999999999999d", "out of range"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(&format!("{text:?}")), "{text}: {err}");
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for (d, text) in [
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(3), "3s"),
            (Duration::from_micros(5), "5us"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
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
