//! `distlock run`, `elect` and `bench` as a user drives them: the child's
//! environment and exit status, the documented exit codes, lost-lock
//! handling, signal forwarding, and one-line errors for bad input.

mod support;

use std::time::Duration;

use distlock::LockName;
use distlock::file::{FileBackend, FileConfig};
use nix::sys::signal::Signal;
use support::{
    BOUND, LOST, NOT_ACQUIRED, NOT_FOUND, USAGE, cli, cmd, distlock, failure, file_fixture,
    one_line_error, output_within, signal_and_wait, spawn_piped, stderr, token, usage_error,
    wait_for_file,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

/// A file backend client of its own on `url`, to hold or break locks from
/// outside the CLI.
async fn outside(url: &str) -> FileBackend {
    FileBackend::connect(FileConfig::from_url(url).unwrap())
        .await
        .unwrap()
}

/// Runs `sh -c SCRIPT` under `distlock run --ttl 2s --grace 300ms NAME`
/// with `$WORK` a fresh directory, ends the lease from outside (as an
/// operator breaking a stuck lock would) once the script has created
/// `$WORK/started`, and checks that distlock exits 76. Returns its output
/// and the directory.
async fn lose_the_lock_while_running(
    name: &str,
    script: &str,
) -> (std::process::Output, tempfile::TempDir) {
    let fixture = file_fixture();
    let work = tempfile::tempdir().unwrap();
    // The TTL leaves the renewal that finds the lease gone (every TTL/3)
    // over a second before the grace point, so the loss, not the grace
    // timer, is what ends the command even on a loaded machine.
    let words = format!("run --ttl 2s --grace 300ms {name} -- sh -c");
    let mut cmd = cmd(Some(&fixture.url), &words);
    cmd.arg(script).env("WORK", work.path());
    let run = tokio::spawn(async move { output_within(BOUND, &mut cmd).await });
    wait_for_file(&work.path().join("started"), BOUND).await;
    let name = LockName::new(name).unwrap();
    let ended = outside(&fixture.url).await.expire_now(&name).await;
    assert!(ended.unwrap(), "{name} was not held");
    let output = run.await.unwrap();
    assert_eq!(output.status.code(), Some(LOST), "{}", stderr(&output));
    (output, work)
}

#[tokio::test]
async fn run_gives_the_command_its_lock_and_exits_with_its_status() {
    let fixture = file_fixture();
    let output = output_within(
        BOUND,
        cmd(Some(&fixture.url), "run jobs/env -- sh -c")
            .arg(r#"echo "$DISTLOCK_NAME|$DISTLOCK_TOKEN|$DISTLOCK_KEY"; exit 7"#),
    )
    .await;
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let fields: Vec<&str> = stdout.trim().split('|').collect();
    assert_eq!(fields[0], "jobs/env");
    assert!(fields[1].parse::<u64>().unwrap() >= 1, "{stdout}");
    assert!(!fields[2].is_empty(), "{stdout}");
    // Released at exit: the next run gets it at once, with a greater token.
    let next = output_within(
        BOUND,
        cmd(Some(&fixture.url), "run --wait 0 jobs/env -- sh -c").arg("echo $DISTLOCK_TOKEN"),
    )
    .await;
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(token(&next) > fields[1].parse().unwrap());
}

/// `distlock run --wait WAIT NAME -- true` while another client holds
/// NAME: checks that it exits 75 and returns its one line and how long the
/// run took.
async fn not_acquired_within(wait: &str, name: &str) -> (String, Duration) {
    let fixture = file_fixture();
    let backend = outside(&fixture.url).await;
    let held = distlock::LockBackendExt::lock(&backend, name)
        .await
        .unwrap();
    let start = Instant::now();
    let output = cli(
        Some(&fixture.url),
        &format!("run --wait {wait} {name} -- true"),
    )
    .await;
    let took = start.elapsed();
    let err = failure(&output, NOT_ACQUIRED, &name);
    held.release().await.unwrap();
    (err, took)
}

#[tokio::test]
async fn run_exits_75_with_one_line_when_not_acquired_within_wait() {
    let (err, took) = not_acquired_within("300ms", "jobs/busy").await;
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(
        err.contains("jobs/busy") && err.contains("not acquired"),
        "{err}"
    );
}

#[tokio::test]
async fn run_terminates_the_command_and_exits_76_when_the_lock_is_lost() {
    let script = r#"trap 'kill $!; touch "$WORK/terminated"; exit 0' TERM; touch "$WORK/started"; sleep 30 >/dev/null 2>&1 & wait"#;
    let (output, work) = lose_the_lock_while_running("jobs/lost", script).await;
    assert!(
        work.path().join("terminated").exists(),
        "the command never got SIGTERM"
    );
    let err = stderr(&output);
    assert!(err.contains("lost lock jobs/lost"), "{err}");
}

#[tokio::test]
async fn run_kills_a_command_that_ignores_sigterm_after_the_grace_period() {
    let script = r#"trap '' TERM; touch "$WORK/started"; while :; do sleep 0.1; done"#;
    let (output, _work) = lose_the_lock_while_running("jobs/stubborn", script).await;
    assert!(stderr(&output).contains("SIGKILL"), "{}", stderr(&output));
}

#[tokio::test]
async fn sigterm_to_distlock_reaches_the_command_and_the_lock_is_released() {
    let fixture = file_fixture();
    let work = tempfile::tempdir().unwrap();
    let started = work.path().join("started");
    let forwarded = work.path().join("forwarded");
    let script = format!(
        r#"trap 'kill $!; touch "{}"; exit 5' TERM; touch "{}"; sleep 30 >/dev/null 2>&1 & wait"#,
        forwarded.display(),
        started.display()
    );
    let child = spawn_piped(cmd(Some(&fixture.url), "run jobs/signal -- sh -c").arg(&script));
    wait_for_file(&started, BOUND).await;
    let output = signal_and_wait(child, Signal::SIGTERM).await;
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(forwarded.exists(), "SIGTERM was not forwarded");
    let again = cli(Some(&fixture.url), "run --wait 0 jobs/signal -- true").await;
    assert!(
        again.status.success(),
        "lock not released: {}",
        stderr(&again)
    );
}

#[tokio::test]
async fn bad_input_gives_one_line_and_the_usage_code_without_connecting() {
    let fixture = file_fixture();
    let long_name = "n".repeat(600);
    let url = fixture.url.as_str();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("not a url", vec!["run", "a", "--", "true"], "malformed"),
        (
            "consul://h:8500",
            vec!["run", "a", "--", "true"],
            "known schemes",
        ),
        (url, vec!["run", "a"], "no command"),
        (url, vec!["run", "a", "--"], "no command"),
        (url, vec!["run", "bad\nname", "--", "true"], "invalid name"),
        (url, vec!["run", &long_name, "--", "true"], "invalid name"),
        (url, vec!["run", "--ttl", "0", "a", "--", "true"], "TTL"),
        (url, vec!["run", "--ttl", "soon", "a", "--", "true"], "soon"),
        (url, vec!["run", "a", "true"], "distlock run a -- true"),
        (
            "file://relative",
            vec!["run", "a", "--", "true"],
            "absolute",
        ),
    ];
    for (url, args, expect) in cases {
        let output = output_within(BOUND, distlock(Some(url)).args(&args)).await;
        let err = usage_error(&output, &(url, &args));
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

#[tokio::test]
async fn backends_not_compiled_in_name_their_feature() {
    for (url, feature) in [
        ("etcd://127.0.0.1:2379", "etcd"),
        ("redis://127.0.0.1:6379", "redis"),
        ("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "redis"),
        ("zk://127.0.0.1:2181", "zk"),
        ("postgres://u@127.0.0.1:5432/db", "postgres"),
        ("mysql://u@127.0.0.1:3306/db", "mysql"),
    ] {
        let compiled = match feature {
            "etcd" => cfg!(feature = "etcd"),
            "redis" => cfg!(feature = "redis"),
            "postgres" => cfg!(feature = "postgres"),
            "mysql" => cfg!(feature = "mysql"),
            _ => cfg!(feature = "zk"),
        };
        if compiled {
            continue;
        }
        let output = cli(Some(url), "run a -- true").await;
        assert_eq!(output.status.code(), Some(USAGE));
        let err = one_line_error(&output);
        assert!(err.contains(&format!("`{feature}` feature")), "{err}");
    }
}

#[tokio::test]
async fn missing_command_exits_127() {
    let fixture = file_fixture();
    let output = cli(Some(&fixture.url), "run a -- distlock-test-no-such-command").await;
    assert_eq!(output.status.code(), Some(NOT_FOUND));
    one_line_error(&output);
}

#[tokio::test]
async fn help_documents_every_exit_code() {
    for args in [vec!["--help"], vec!["run", "--help"]] {
        let output = output_within(BOUND, distlock(None).args(&args)).await;
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        for code in ["64", "69", "75", "76", "77", "126", "127"] {
            assert!(
                help.contains(&format!("  {code} ")),
                "{args:?} lacks exit code {code}"
            );
        }
    }
}

#[tokio::test]
async fn elect_wins_and_listen_prints_each_new_leader() {
    let fixture = file_fixture();
    let mut listen = distlock(Some(&fixture.url));
    listen
        .args(["elect", "--listen", "cli/election"])
        .stdout(std::process::Stdio::piped());
    let mut listener = listen.spawn().unwrap();
    let mut lines = BufReader::new(listener.stdout.take().unwrap()).lines();

    let mut leaders = Vec::new();
    for value in ["first", "second"] {
        let mut cmd = distlock(Some(&fixture.url));
        cmd.args(["elect", "cli/election", value])
            .stdout(std::process::Stdio::piped());
        let mut leader = cmd.spawn().unwrap();
        let mut out = BufReader::new(leader.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(BOUND, out.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            line.starts_with("elected name=cli/election token="),
            "{line}"
        );
        assert!(line.contains(&format!("value={value}")), "{line}");
        let seen = tokio::time::timeout(BOUND, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(seen, value);
        let pid = nix::unistd::Pid::from_raw(leader.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = tokio::time::timeout(BOUND, leader.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "resign on SIGINT: {status:?}");
        leaders.push(leader);
    }
    listener.start_kill().unwrap();
}

#[tokio::test]
async fn bench_prints_a_table_and_writes_json_and_svg() {
    let fixture = file_fixture();
    let work = tempfile::tempdir().unwrap();
    let (json, svg) = (
        work.path().join("bench.json"),
        work.path().join("bench.svg"),
    );
    let output = output_within(
        Duration::from_secs(60),
        cmd(None, "bench --url memory:// --clients 2 --duration 500ms")
            .args(["--url", &fixture.url, "--json"])
            .arg(&json)
            .arg("--plot")
            .arg(&svg),
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows[1].starts_with("backend")
            && rows[1].contains("acq/s")
            && rows[1].contains("violations"),
        "{table}"
    );
    assert!(
        rows[2].starts_with("memory") && rows[3].starts_with("file"),
        "{table}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for result in results {
        assert!(
            result["report"]["acquisitions"].as_u64().unwrap() > 0,
            "{result}"
        );
        assert_eq!(result["report"]["violations"].as_u64(), Some(0), "{result}");
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    // The chart's content is checked in tests/cli_bench.rs.
    assert!(svg.starts_with("<svg"), "{svg:.200}");
}

#[tokio::test]
async fn an_explicit_directory_is_used_as_given() {
    let fixture = file_fixture();
    let dir = fixture.url.strip_prefix("file://").unwrap().to_owned();
    let output = output_within(
        BOUND,
        cmd(Some(&fixture.url), "run jobs/given -- sh -c").arg("echo $DISTLOCK_KEY"),
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        std::path::Path::new(&dir)
            .join("locks/jobs%2Fgiven.rec")
            .exists()
    );
}

#[tokio::test]
async fn url_flag_beats_environment_beats_config_file() {
    let (from_file, from_env, from_flag) = (file_fixture(), file_fixture(), file_fixture());
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("distlock.toml");
    std::fs::write(
        &config,
        format!("url = \"{}\"\nttl = \"5s\"\n", from_file.url),
    )
    .unwrap();
    let url_seen = |output: std::process::Output| {
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    let show = |flag: Option<&str>, env: Option<&str>| {
        let mut cmd = distlock(flag);
        cmd.arg("--config").arg(&config).args([
            "run",
            "jobs/which",
            "--",
            "sh",
            "-c",
            "echo $DISTLOCK_URL",
        ]);
        if let Some(url) = env {
            cmd.env("DISTLOCK_URL", url);
        }
        cmd
    };
    let cases = [
        (None, None, &from_file.url),
        (None, Some(&from_env.url), &from_env.url),
        (Some(&from_flag.url), Some(&from_env.url), &from_flag.url),
    ];
    for (flag, env, expected) in cases {
        let mut cmd = show(flag.map(String::as_str), env.map(String::as_str));
        let seen = url_seen(output_within(BOUND, &mut cmd).await);
        assert_eq!(&seen, expected, "--url {flag:?}, DISTLOCK_URL {env:?}");
    }
}

#[tokio::test]
async fn bad_config_file_or_environment_is_a_usage_error() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("bad.toml");
    std::fs::write(&config, "url = \"memory://\"\nttl = \"forever\"\n").unwrap();
    let mut with_config = distlock(None);
    with_config
        .arg("--config")
        .arg(&config)
        .args(["run", "a", "--", "true"]);
    let output = output_within(BOUND, &mut with_config).await;
    assert_eq!(output.status.code(), Some(USAGE));
    assert!(one_line_error(&output).contains("bad.toml"));
    let output = output_within(BOUND, cmd(None, "run a -- true").env("DISTLOCK_TTL", "0")).await;
    assert_eq!(output.status.code(), Some(USAGE));
    let err = one_line_error(&output);
    assert!(err.contains("DISTLOCK_TTL") && err.contains("TTL"), "{err}");
}

/// An unreachable server fails with one line and code 69, within the
/// connect timeout plus slack, never a hang.
#[cfg(any(
    feature = "etcd",
    feature = "redis",
    feature = "zk",
    feature = "postgres",
    feature = "mysql"
))]
async fn unreachable_server_fails_fast(url: &str) {
    let start = Instant::now();
    let output = cli(Some(url), "--connect-timeout 2s run a -- true").await;
    assert_eq!(output.status.code(), Some(69), "{url}: {}", stderr(&output));
    let err = one_line_error(&output);
    assert!(
        err.contains("127.0.0.1:1"),
        "{url}: the message names the address: {err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{url}: took {:?}",
        start.elapsed()
    );
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn unreachable_etcd_fails_fast_with_one_line() {
    unreachable_server_fails_fast("etcd://127.0.0.1:1").await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn unreachable_redis_fails_fast_with_one_line() {
    unreachable_server_fails_fast("redis://127.0.0.1:1").await;
}

#[cfg(feature = "zk")]
#[tokio::test]
async fn unreachable_zookeeper_fails_fast_with_one_line() {
    unreachable_server_fails_fast("zk://127.0.0.1:1").await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn unreachable_postgres_fails_fast_with_one_line() {
    unreachable_server_fails_fast("postgres://u@127.0.0.1:1/db").await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn unreachable_mysql_fails_fast_with_one_line() {
    unreachable_server_fails_fast("mysql://u@127.0.0.1:1/db").await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn wrong_mysql_password_exits_77() {
    let server = distlock_testkit::servers::MariadbServer::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "mysql://{}:wrong@{}/{}",
        distlock_testkit::servers::mariadb::TEST_USER,
        server.addr(),
        distlock_testkit::servers::mariadb::TEST_DATABASE
    );
    let output = cli(Some(&url), "run a -- true").await;
    assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
    let err = one_line_error(&output);
    assert!(!err.contains("wrong"), "the password leaked: {err}");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn wrong_postgres_password_exits_77() {
    let server = distlock_testkit::servers::PostgresServer::start_with_password("right")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("postgres://postgres:wrong@{}/postgres", server.addr());
    let output = cli(Some(&url), "run a -- true").await;
    assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
    let err = one_line_error(&output);
    assert!(!err.contains("wrong"), "the password leaked: {err}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn wrong_redis_password_exits_77() {
    let server = distlock_testkit::servers::RedisServer::start_with_password("right")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("redis://:wrong@{}", server.addr());
    let output = cli(Some(&url), "run a -- true").await;
    assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
    let err = one_line_error(&output);
    assert!(!err.contains("wrong"), "the password leaked: {err}");
}

#[tokio::test]
async fn a_command_without_double_dash_is_told_where_to_put_it() {
    let fixture = file_fixture();
    for (args, suggestion) in [
        (vec!["run", "x", "echo", "hi"], "distlock run x -- echo hi"),
        (
            vec!["run", "--wait", "1s", "x", "ls", "-l", "/"],
            "distlock run x -- ls -l /",
        ),
    ] {
        let output = output_within(BOUND, distlock(Some(&fixture.url)).args(&args)).await;
        let err = usage_error(&output, &args);
        assert!(err.contains(suggestion), "{args:?}: {err}");
        assert!(err.contains("`--`"), "{args:?}: {err}");
    }
}

/// `distlock CMD --help` lists the exit codes CMD can give, and no others.
#[tokio::test]
async fn each_command_help_lists_only_its_own_exit_codes() {
    let cases: [(&str, &[&str], &[&str]); 2] = [
        (
            "bench",
            &["64", "69", "73"],
            &["75", "76", "126", "127", "130"],
        ),
        (
            "elect",
            &["64", "69", "76", "77", "130", "143"],
            &["75", "126", "127"],
        ),
    ];
    for (command, shown, absent) in cases {
        let output = cli(None, &format!("{command} --help")).await;
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        for code in shown {
            assert!(
                help.contains(&format!("  {code} ")),
                "{command} lacks {code}:\n{help}"
            );
        }
        for code in absent {
            assert!(
                !help.contains(&format!("  {code} ")),
                "{command} shows {code}:\n{help}"
            );
        }
        assert!(!help.contains("own exit status"), "{command}:\n{help}");
    }
}

/// Tests run without a terminal: waiting prints nothing there.
#[tokio::test]
async fn waiting_prints_nothing_when_stderr_is_not_a_terminal() {
    let (err, _) = not_acquired_within("1s", "jobs/quiet").await;
    assert!(
        err.contains("not acquired") && !err.contains("waiting"),
        "{err}"
    );
}

#[tokio::test]
async fn verbose_logs_have_no_colour_codes_when_stderr_is_piped() {
    let fixture = file_fixture();
    let output = cli(Some(&fixture.url), "-v run jobs/logged -- true").await;
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("acquired"), "-v logs nothing: {err:?}");
    assert!(!err.contains("\x1b["), "ANSI codes on a pipe: {err:?}");
}

/// `memory://` lives inside one process: `run` and `elect` would
/// coordinate with no one.
#[tokio::test]
async fn memory_is_refused_for_run_and_elect() {
    for args in [
        "--url memory:// run a -- true",
        "--url memory://team elect a me",
        "--url memory:// elect --listen a",
    ] {
        let output = cli(None, args).await;
        let err = usage_error(&output, &args);
        assert!(
            err.contains("memory://") && err.contains("one process") && err.contains("file://"),
            "{args:?}: {err}"
        );
    }
    let output = output_within(
        BOUND,
        cmd(None, "run a -- true").env("DISTLOCK_URL", "memory://"),
    )
    .await;
    assert_eq!(output.status.code(), Some(USAGE), "{}", stderr(&output));
}

#[tokio::test]
async fn bench_refuses_a_plot_that_is_not_svg_before_running() {
    let work = tempfile::tempdir().unwrap();
    let png = work.path().join("out.png");
    let start = Instant::now();
    let output = output_within(
        BOUND,
        cmd(Some("memory://"), "bench --duration 20s --plot").arg(&png),
    )
    .await;
    assert_eq!(output.status.code(), Some(USAGE), "{}", stderr(&output));
    let err = one_line_error(&output);
    assert!(err.contains("out.png") && err.contains(".svg"), "{err}");
    assert!(output.stdout.is_empty(), "the benchmark ran");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(!png.exists());
}

/// Exit code for an output file that cannot be created (sysexits `EX_CANTCREAT`).
const CANNOT_CREATE: i32 = 73;

#[tokio::test]
async fn bench_checks_its_output_files_before_running() {
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("no-such-dir");
    for (flag, file) in [("--json", "out.json"), ("--plot", "out.svg")] {
        let path = missing.join(file);
        let start = Instant::now();
        let output = output_within(
            BOUND,
            cmd(Some("memory://"), "bench --duration 20s")
                .arg(flag)
                .arg(&path),
        )
        .await;
        let elapsed = start.elapsed();
        let err = failure(&output, CANNOT_CREATE, &flag);
        assert!(
            err.contains(&path.display().to_string()) && err.contains(flag),
            "{err}"
        );
        assert!(output.stdout.is_empty(), "{flag}: the benchmark ran");
        assert!(elapsed < Duration::from_secs(2), "{flag}: took {elapsed:?}");
    }
}

/// What `run --help` lists under "The command's environment" is exactly
/// what the command gets from distlock.
#[tokio::test]
async fn the_command_gets_exactly_the_documented_variables() {
    let help = cli(None, "run --help").await;
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let section = help
        .split("The command's environment")
        .nth(1)
        .unwrap_or_else(|| panic!("no environment section:\n{help}"))
        .split("\n\n")
        .next()
        .unwrap();
    let mut documented: Vec<&str> = section
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| w.starts_with("DISTLOCK_"))
        .collect();
    documented.sort();
    documented.dedup();
    let fixture = file_fixture();
    let output = cli(Some(&fixture.url), "run jobs/vars -- env").await;
    assert!(output.status.success(), "{}", stderr(&output));
    let env = String::from_utf8_lossy(&output.stdout);
    let mut seen: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("DISTLOCK_"))
        .map(|(k, _)| k)
        .collect();
    seen.sort();
    assert_eq!(seen, documented, "{section}");
    for var in [
        "DISTLOCK_NAME",
        "DISTLOCK_TOKEN",
        "DISTLOCK_KEY",
        "DISTLOCK_URL",
    ] {
        assert!(seen.contains(&var), "{var} missing: {env}");
    }
    assert!(
        env.contains(&format!("DISTLOCK_URL={}\n", fixture.url)),
        "{env}"
    );
}
