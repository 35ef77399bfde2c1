//! Each backend's default lease TTL, for the help: read from the backend
//! crates, so the help cannot drift from what they do.

use distlock::format_duration;

/// `BACKENDS TTL` and a note, one entry of the list.
fn entry(backends: &str, ttl: std::time::Duration, note: &str) -> String {
    format!("{backends} {}{note}", format_duration(ttl))
}

/// `file 10s, etcd/etcds 10s, ...` for the backends in this build, memory
/// only for `bench` (the other commands refuse it).
fn ttls(memory: bool) -> String {
    let mut parts = Vec::new();
    if memory {
        parts.push(entry("memory", distlock::memory::DEFAULT_TTL, ""));
    }
    parts.push(entry("file", distlock::file::DEFAULT_TTL, ""));
    #[cfg(feature = "etcd")]
    parts.push(entry("etcd/etcds", distlock::etcd::DEFAULT_TTL, ""));
    #[cfg(feature = "redis")]
    parts.push(entry(
        "redis/rediss/redlock/redis+cluster",
        distlock::redis::DEFAULT_TTL,
        "",
    ));
    #[cfg(feature = "zk")]
    parts.push(entry(
        "zk",
        distlock::zk::DEFAULT_TTL,
        " (the session timeout)",
    ));
    #[cfg(feature = "postgres")]
    parts.push(entry(
        "postgres/postgresql",
        distlock::postgres::DEFAULT_TTL,
        "",
    ));
    #[cfg(feature = "mysql")]
    parts.push(entry("mysql/mariadb", distlock::mysql::DEFAULT_TTL, ""));
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
