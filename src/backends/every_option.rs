//! Every option of every backend's URL is a setting, and reaches the
//! backend's config the same through the URL, a config file and the
//! environment. The options come from each backend's own unknown-option
//! error, so an option added to a URL and not to the settings fails here.

use std::fmt::Debug;

use distlock_core::raw::setting_of_url_option;
use distlock_core::{Error, Result};

use super::{etcd, file, mysql, postgres, redis, zk};
use crate::config::Config;

/// One backend: a URL with none of its options, and how the facade turns a
/// URL and a [`Config`] into the backend's config, shown by `Debug`.
struct Case {
    base: String,
    resolve: fn(&str, &Config) -> Result<String>,
}

fn shown<T: Debug>(config: Result<T>) -> Result<String> {
    config.map(|config| format!("{config:?}"))
}

fn cases(dir: &str) -> Vec<Case> {
    let case = |base: &str, resolve| Case {
        base: base.to_owned(),
        resolve,
    };
    vec![
        case(&format!("file://{dir}"), |u, c| {
            shown(file::file_config(u, c))
        }),
        case("etcd://127.0.0.1:1", |u, c| shown(etcd::etcd_config(u, c))),
        case("redis://127.0.0.1:1", |u, c| {
            shown(redis::redis_config(u, c))
        }),
        case("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", |u, c| {
            shown(redis::redlock_config(u, c))
        }),
        case("redis+cluster://127.0.0.1:1,127.0.0.1:2", |u, c| {
            shown(redis::cluster_config(u, c))
        }),
        case("zk://127.0.0.1:1", |u, c| shown(zk::zk_config(u, c))),
        case("postgres://app@127.0.0.1:1/db", |u, c| {
            shown(postgres::postgres_config(u, c))
        }),
        case("mysql://app@127.0.0.1:1/db", |u, c| {
            shown(mysql::mysql_config(u, c))
        }),
    ]
}

/// The options the URL of `case` takes, as its unknown-option error lists them.
fn url_options(case: &Case) -> Vec<String> {
    let url = format!("{}?no_such_option=1", case.base);
    let err: Error = (case.resolve)(&url, &Config::default()).expect_err(&url);
    let (_, known) = err
        .message()
        .split_once("known: ")
        .unwrap_or_else(|| panic!("{url}: the error lists no known options: {err}"));
    let known = known.split(';').next().unwrap();
    known.split(", ").map(|o| o.trim().to_owned()).collect()
}

/// Settings given together.
type Pairs = &'static [(&'static str, &'static str)];

/// A value the backend of `base` accepts for `name`, and the settings it
/// needs beside it.
fn sample(base: &str, name: &str) -> (&'static str, Pairs) {
    let layout = match base.split_once("://").unwrap().0 {
        "etcd" => "concurrency",
        "zk" => "curator",
        "postgres" => "advisory",
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redlock" => "plain",
        _ => "named",
    };
    match name {
        "ttl" => ("7s", &[]),
        "connect_timeout" => ("3s", &[]),
        "request_timeout" => ("1500ms", &[]),
        "keepalive_interval" => ("6s", &[]),
        "username" | "password" => {
            let value = if name == "username" { "someone" } else { "pw" };
            (value, &[("username", "someone"), ("password", "pw")])
        }
        "prefix" => ("jobs", &[]),
        "holder" => ("worker-1", &[]),
        "layout" => (layout, &[]),
        "fsync" | "fair" => ("false", &[]),
        "tls" | "tls_insecure" => ("true", &[]),
        "tls.ca" => ("/ca.pem", &[]),
        // A client certificate needs its key; etcd's, a CA as well.
        "tls.cert" | "tls.key" => {
            let value = if name == "tls.cert" {
                "/c.pem"
            } else {
                "/k.pem"
            };
            let identity: Pairs = if base.starts_with("etcd") {
                &[
                    ("tls.cert", "/c.pem"),
                    ("tls.key", "/k.pem"),
                    ("tls.ca", "/ca.pem"),
                ]
            } else {
                &[("tls.cert", "/c.pem"), ("tls.key", "/k.pem")]
            };
            (value, identity)
        }
        "schema" => ("app_locks", &[]),
        "sslmode" => ("disable", &[]),
        "table_prefix" => ("app_", &[]),
        "pool_size" => ("3", &[]),
        "ssl_mode" => ("required", &[]),
        other => panic!("no sample value for {other}"),
    }
}

/// `name = value` in TOML: a boolean or a number bare, else a string.
fn toml_line(name: &str, value: &str) -> String {
    if value.parse::<bool>().is_ok() || value.parse::<u64>().is_ok() {
        format!("{name} = {value}\n")
    } else {
        format!("{name} = \"{value}\"\n")
    }
}

fn env_of(name: &str) -> &'static str {
    setting_of_url_option(name)
        .map(|spec| spec.env)
        .unwrap_or_else(|| panic!("{name} is no setting"))
}

#[test]
fn every_url_option_reaches_the_backend_from_a_file_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for case in cases(&dir.path().display().to_string()) {
        let base = case.base.as_str();
        let unset = (case.resolve)(base, &Config::default()).unwrap();
        for option in url_options(&case) {
            let spec = setting_of_url_option(&option)
                .unwrap_or_else(|| panic!("{base}: URL option {option} is no setting"));
            if spec.name != option
                || (option == "tls_insecure" && !cfg!(feature = "redis-insecure-tls"))
            {
                // An alias is its setting's other spelling; accepting any
                // certificate needs a cargo feature.
                continue;
            }
            let (value, companion) = sample(base, &option);
            let pairs: Vec<(&str, &str)> = std::iter::once((option.as_str(), value))
                .chain(
                    companion
                        .iter()
                        .copied()
                        .filter(|(name, _)| *name != option),
                )
                .collect();
            let query: Vec<String> = pairs.iter().map(|(n, v)| format!("{n}={v}")).collect();
            let in_url = (case.resolve)(&format!("{base}?{}", query.join("&")), &Config::default());
            let mut toml = toml_line("url", base);
            for (name, value) in &pairs {
                toml.push_str(&toml_line(name, value));
            }
            let from_file = Config::from_toml_str(&toml).unwrap_or_else(|e| panic!("{toml}: {e}"));
            let from_env = Config::from_lookup(|key| {
                pairs
                    .iter()
                    .find(|(name, _)| env_of(name) == key)
                    .map(|(_, value)| value.to_string())
            })
            .unwrap();
            let sources = [("file", from_file), ("environment", from_env)];
            let refusal = format!("has no {option} setting");
            let in_url = match in_url {
                // Parsed by the shared URL form, refused by this backend
                // (Redlock's fair): refused from every source alike.
                Err(e) if e.message().contains(&refusal) => {
                    for (source, config) in sources {
                        let err = (case.resolve)(base, &config).expect_err(source);
                        assert!(err.message().contains(&refusal), "{base}, {source}: {err}");
                    }
                    continue;
                }
                // A value this backend does not offer (Redis's plain layout
                // on Redlock or a cluster): refused from every source alike.
                Err(e) if e.kind() == crate::ErrorKind::Unsupported => {
                    for (source, config) in sources {
                        let err = (case.resolve)(base, &config).expect_err(source);
                        assert_eq!(err.kind(), e.kind(), "{base}, {source}: {err}");
                    }
                    continue;
                }
                in_url => in_url.unwrap_or_else(|e| panic!("{base}?{option}: {e}")),
            };
            assert_ne!(in_url, unset, "{base}: {option}={value} changes nothing");
            for (source, config) in sources {
                let got = (case.resolve)(base, &config)
                    .unwrap_or_else(|e| panic!("{base}: {option} from the {source}: {e}"));
                assert_eq!(got, in_url, "{base}: {option} from the {source}");
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} options checked");
}
