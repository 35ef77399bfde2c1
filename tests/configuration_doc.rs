//! docs/configuration.md states what the code does: its settings table has
//! one row per entry of `distlock::SETTINGS` (plus `url`), each with that
//! entry's environment variable and no row names an unknown setting; and
//! its defaults table gives each backend's defaults as the backend crates
//! define them.

use std::path::PathBuf;
use std::time::Duration;

fn doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of the first table under `heading`, without its header.
fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let section = doc
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/configuration.md has no \"## {heading}\""));
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// `` `name` `` → `name`.
fn code(cell: &str) -> &str {
    cell.trim_matches('`')
}

#[test]
fn every_setting_is_documented_with_its_variable() {
    let rows = table(&doc(), "Settings");
    let mut documented = Vec::new();
    for row in &rows {
        let (name, env) = (code(&row[0]), code(&row[1]));
        if name == "url" {
            assert_eq!(env, distlock::URL_ENV);
        } else {
            let spec = distlock::SETTINGS
                .iter()
                .find(|spec| spec.name == name)
                .unwrap_or_else(|| panic!("docs/configuration.md names unknown setting {name:?}"));
            assert_eq!(env, spec.env, "the variable of {name}");
        }
        documented.push(name);
    }
    let expected: Vec<&str> = std::iter::once("url")
        .chain(distlock::SETTINGS.iter().map(|spec| spec.name))
        .collect();
    assert_eq!(
        documented, expected,
        "docs/configuration.md's settings, in SETTINGS order"
    );
}

/// A defaults cell as a duration: `10 s (session timeout)` is 10 s; `–` is none.
fn duration_cell(cell: &str) -> Option<Duration> {
    let value = cell.split([',', '(']).next().unwrap().trim();
    (value != "–").then(|| {
        distlock::parse_duration(&value.replace(' ', ""))
            .unwrap_or_else(|e| panic!("defaults cell {cell:?}: {e}"))
    })
}

/// One backend's defaults: TTL, minimum TTL, connect and request timeouts,
/// prefix (`None` where the backend has no such setting).
type Defaults = (
    Duration,
    Option<Duration>,
    Option<Duration>,
    Option<Duration>,
    Option<String>,
);

#[cfg(all(
    feature = "etcd",
    feature = "redis",
    feature = "zk",
    feature = "postgres",
    feature = "mysql"
))]
fn code_defaults(backend: &str) -> Defaults {
    use distlock_core::ClientConfig;

    fn client(mut config: impl ClientConfig) -> (Duration, Duration, String) {
        let fields = config.client_fields();
        (
            *fields.connect_timeout,
            *fields.request_timeout,
            fields.prefix.clone(),
        )
    }
    let networked = |ttl, min, (connect, request, prefix): (Duration, Duration, String)| {
        let prefix = if prefix.is_empty() {
            "none".to_owned()
        } else {
            format!("`{prefix}`")
        };
        (ttl, min, Some(connect), Some(request), Some(prefix))
    };
    match backend {
        "memory" => (
            distlock::memory::DEFAULT_TTL,
            Some(distlock::MIN_TTL),
            None,
            None,
            None,
        ),
        "file" => (
            distlock::file::DEFAULT_TTL,
            Some(distlock::MIN_TTL),
            None,
            Some(distlock::file::DEFAULT_REQUEST_TIMEOUT),
            None,
        ),
        "etcd" => networked(
            distlock::etcd::DEFAULT_TTL,
            // etcd's own minimum lease: one second.
            Some(Duration::from_secs(1)),
            client(distlock::etcd::EtcdConfig::new(["127.0.0.1:2379"])),
        ),
        "Redis, Redis Cluster, Redlock" => networked(
            distlock::redis::DEFAULT_TTL,
            Some(distlock::MIN_TTL),
            client(distlock::redis::RedisConfig::new("127.0.0.1", 6379)),
        ),
        "ZooKeeper" => networked(
            distlock::zk::DEFAULT_TTL,
            Some(distlock::zk::MIN_SESSION_TIMEOUT),
            client(distlock::zk::ZkConfig::default()),
        ),
        "PostgreSQL" => networked(
            distlock::postgres::DEFAULT_TTL,
            Some(distlock::postgres::MIN_TTL),
            client(distlock::postgres::PostgresConfig::new("127.0.0.1", 5432)),
        ),
        "MySQL" => networked(
            distlock::mysql::DEFAULT_TTL,
            Some(distlock::mysql::MIN_TTL),
            client(distlock::mysql::MysqlConfig::new("127.0.0.1", 3306)),
        ),
        other => panic!("docs/configuration.md's defaults name unknown backend {other:?}"),
    }
}

#[cfg(all(
    feature = "etcd",
    feature = "redis",
    feature = "zk",
    feature = "postgres",
    feature = "mysql"
))]
#[test]
fn the_defaults_table_matches_the_backends() {
    let rows = table(&doc(), "Defaults per backend");
    assert_eq!(rows.len(), 7, "one row per backend");
    for row in rows {
        let prefix = (row[5] != "–").then(|| row[5].clone());
        let documented = (
            duration_cell(&row[1]).expect("a TTL"),
            duration_cell(&row[2]),
            duration_cell(&row[3]),
            duration_cell(&row[4]),
            prefix,
        );
        assert_eq!(documented, code_defaults(&row[0]), "defaults of {}", row[0]);
    }
}
