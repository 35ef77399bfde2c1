//! Keeping secrets out of messages, logs and `Debug` output.

/// `url` with any password replaced by `***` (`redis://user:***@host`),
/// including a `password=` query option: one implementation, shared with the
/// backends through `distlock-core`.
///
/// ```
/// assert_eq!(distlock::redact_url("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(distlock::redact_url("redlock://:pw@a:1,b:2"), "redlock://:***@a:1,b:2");
/// assert_eq!(distlock::redact_url("etcd://a:2379"), "etcd://a:2379");
/// ```
pub use distlock_core::raw::redact_url;

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
