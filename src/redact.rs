//! Keeping secrets out of messages, logs and `Debug` output.

/// `url` with any password replaced by `***` (`redis://user:***@host`).
///
/// Works on URLs that do not parse too (several hosts, no scheme): whatever
/// sits between `//` (or the start) and the last `@` before the host part
/// is treated as user info.
///
/// ```
/// assert_eq!(distlock::redact_url("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(distlock::redact_url("redlock://:pw@a:1,b:2"), "redlock://:***@a:1,b:2");
/// assert_eq!(distlock::redact_url("etcd://a:2379"), "etcd://a:2379");
/// ```
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let user = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_owned(),
    };
    format!("{}{}@{}", &url[..start], user, &url[start + at + 1..])
}

/// `"***"` if a secret is set, for `Debug` impls.
pub(crate) fn secret(value: &Option<String>) -> Option<&'static str> {
    value.as_ref().map(|_| "***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_survive() {
        for url in [
            "redis://u:pw@h:1",
            "rediss://:pw@h:1/0?x=1",
            "zk://u:pw@a:1,b:2/chroot",
            "u:pw@h:1",
            "etcd://u:p@ss:w@h:1",
        ] {
            let redacted = redact_url(url);
            assert!(
                !redacted.contains("pw") && !redacted.contains("ss:w"),
                "{url} -> {redacted}"
            );
            assert!(redacted.contains("***"), "{url} -> {redacted}");
        }
        assert_eq!(redact_url("memory://"), "memory://");
        assert_eq!(redact_url("file:///tmp/x@y"), "file:///tmp/x@y");
    }
}
