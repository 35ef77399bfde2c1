//! Each backend's default lease TTL, for the help: read from the backend
//! crates, so the help cannot drift from what they do.

use distlock::format_duration;

/// `file 10s, etcd/etcds 10s, ...` for the backends in this build, memory
/// only for `bench` (the other commands refuse it).
fn ttls(memory: bool) -> String {
    let mut parts = Vec::new();
    if memory {
        parts.push(format!(
            "memory {}",
            format_duration(distlock::memory::DEFAULT_TTL)
        ));
    }
    parts.push(format!(
        "file {}",
        format_duration(distlock::file::DEFAULT_TTL)
    ));
    #[cfg(feature = "etcd")]
    parts.push(format!(
        "etcd/etcds {}",
        format_duration(distlock::etcd::DEFAULT_TTL)
    ));
    #[cfg(feature = "redis")]
    parts.push(format!(
        "redis/rediss/redlock {}",
        format_duration(distlock::redis::DEFAULT_TTL)
    ));
    #[cfg(feature = "zk")]
    parts.push(format!(
        "zk {} (the session timeout)",
        format_duration(distlock::zk::DEFAULT_TTL)
    ));
    parts.join(", ")
}

/// The help of a `--ttl` option of `run` or `elect`: `what`, then the defaults.
pub(crate) fn ttl_help(what: &str) -> String {
    format!("{what} Default: the backend's: {}", ttls(false))
}

/// The help of `bench --ttl`.
pub(crate) fn bench_ttl_help() -> String {
    format!("Lease TTL. Default: each backend's: {}", ttls(true))
}
