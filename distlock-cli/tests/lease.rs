//! What `distlock run` guarantees about its lease, on real servers: TTLs a
//! backend cannot honour are usage errors, the command is gone before the
//! lock can pass to another holder, and a waiter interrupted with Ctrl-C
//! gives up its place at once.

mod support;

use std::time::Duration;

use support::{BOUND, cli, cmd, file_fixture, output_within, stderr, usage_error};

#[tokio::test]
async fn ttl_below_the_minimum_is_a_usage_error_naming_the_minimum() {
    let fixture = file_fixture();
    let mut urls = vec![fixture.url.clone()];
    if cfg!(feature = "redis") {
        // Checked before connecting: no server is needed.
        urls.push("redis://127.0.0.1:1".to_owned());
    }
    for url in urls {
        let output = cli(Some(&url), "run --ttl 2ms jobs/short -- true").await;
        let err = usage_error(&output, &url);
        assert!(
            err.contains("--ttl") && err.contains("10ms"),
            "{url}: {err}"
        );
    }
}

#[tokio::test]
async fn grace_over_half_the_ttl_is_a_usage_error() {
    let fixture = file_fixture();
    let output = cli(
        Some(&fixture.url),
        "run --ttl 1s --grace 800ms jobs/grace -- true",
    )
    .await;
    let err = usage_error(&output, &"--ttl 1s --grace 800ms");
    assert!(err.contains("--grace"), "{err}");
}

/// `--ttl` states each compiled-in backend's default, as the backend crates
/// define it.
#[tokio::test]
async fn ttl_help_states_each_backends_default() {
    use distlock::format_duration;
    #[allow(unused_mut)] // Only network backends add to it.
    let mut expected = vec![format!(
        "file {}",
        format_duration(distlock::file::DEFAULT_TTL)
    )];
    #[cfg(feature = "etcd")]
    expected.push(format!(
        "etcd/etcds {}",
        format_duration(distlock::etcd::DEFAULT_TTL)
    ));
    #[cfg(feature = "redis")]
    expected.push(format!(
        "redis/rediss/redlock/redis+cluster {}",
        format_duration(distlock::redis::DEFAULT_TTL)
    ));
    #[cfg(feature = "zk")]
    expected.push(format!(
        "zk {}",
        format_duration(distlock::zk::ZkConfig::default().default_ttl)
    ));
    #[cfg(feature = "postgres")]
    expected.push(format!(
        "postgres/postgresql {}",
        format_duration(distlock::postgres::DEFAULT_TTL)
    ));
    #[cfg(feature = "mysql")]
    expected.push(format!(
        "mysql/mariadb {}",
        format_duration(distlock::mysql::DEFAULT_TTL)
    ));
    let memory = format!("memory {}", format_duration(distlock::memory::DEFAULT_TTL));
    for command in ["run", "elect", "bench"] {
        let output = cli(None, &format!("{command} --help")).await;
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        // Only bench takes memory://.
        assert_eq!(
            help.contains(&memory),
            command == "bench",
            "{command}:\n{help}"
        );
        for default in &expected {
            assert!(
                help.contains(default.as_str()),
                "{command} --help lacks {default:?}:\n{help}"
            );
        }
    }
}

/// Nanoseconds since the epoch, as `date +%s%N` wrote them into `path`.
#[cfg(feature = "redis")]
fn stamp(path: &std::path::Path) -> u128 {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{} missing: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use distlock_testkit::proxy::FaultProxy;
    use distlock_testkit::servers::RedisServer;
    use support::{spawn_piped, wait_for_file};

    async fn redis() -> RedisServer {
        RedisServer::start().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// A holder partitioned from Redis runs a command that needs half the
    /// grace period to exit after SIGTERM. The command must have exited
    /// before the next holder's command starts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partitioned_holders_command_is_gone_before_the_next_holder_starts() {
        let server = redis().await;
        let proxy = FaultProxy::start(server.addr().parse().unwrap())
            .await
            .unwrap();
        let work = tempfile::tempdir().unwrap();
        let (started, ended, second) = (
            work.path().join("started"),
            work.path().join("ended"),
            work.path().join("second"),
        );
        // On SIGTERM the command takes 200 ms (half of --grace) to exit.
        let script = format!(
            r#"trap 'kill $! 2>/dev/null; sleep 0.2; date +%s%N > "{}"; exit 0' TERM; touch "{}"; sleep 30 >/dev/null 2>&1 & wait"#,
            ended.display(),
            started.display()
        );
        let holder_url = format!("redis://{}", proxy.addr());
        let mut holder = cmd(
            Some(&holder_url),
            "run --ttl 1s --grace 400ms jobs/partition -- sh -c",
        );
        holder.arg(&script);
        let holder = tokio::spawn(async move { output_within(BOUND, &mut holder).await });
        wait_for_file(&started, BOUND).await;
        proxy.blackhole();
        let next_script = format!(r#"date +%s%N > "{}""#, second.display());
        let next = output_within(
            BOUND,
            cmd(
                Some(&server.url()),
                "run --ttl 1s --wait 20s jobs/partition -- sh -c",
            )
            .arg(&next_script),
        )
        .await;
        assert!(next.status.success(), "{}", stderr(&next));
        let held = holder.await.unwrap();
        assert_eq!(held.status.code(), Some(76), "{}", stderr(&held));
        // What was left of the lease is said as a person reads it: `0.38 s`.
        let err = stderr(&held);
        let left = err
            .split("could not be renewed and has ")
            .nth(1)
            .and_then(|rest| rest.split(" of its lease left").next())
            .unwrap_or_else(|| panic!("no lease left in {err}"));
        let seconds = left
            .strip_suffix(" s")
            .unwrap_or_else(|| panic!("{left:?}"));
        assert!(seconds.parse::<f64>().unwrap() <= 0.4, "{left:?}");
        let (ended_at, next_at) = (stamp(&ended), stamp(&second));
        assert!(
            ended_at < next_at,
            "the partitioned holder's command was still running {} ms after the next \
             holder's started; its distlock said: {}",
            (ended_at - next_at) / 1_000_000,
            stderr(&held)
        );
    }

    /// The length of the wait queue of lock `name`.
    async fn queued(server: &RedisServer, name: &str) -> usize {
        let pattern = format!("*:{{{name}}}:queue");
        let keys = server.command(&["KEYS", &pattern]).await.unwrap();
        let distlock_testkit::servers::RespReply::Array(Some(keys)) = keys else {
            return 0;
        };
        let Some(key) = keys.first().and_then(|k| k.as_text()) else {
            return 0;
        };
        match server.command(&["LLEN", key]).await.unwrap() {
            distlock_testkit::servers::RespReply::Integer(n) => n as usize,
            other => panic!("LLEN {key}: {other}"),
        }
    }

    async fn until_queued(server: &RedisServer, name: &str, n: usize) {
        let start = tokio::time::Instant::now();
        while queued(server, name).await != n {
            assert!(start.elapsed() < BOUND, "queue of {name} never reached {n}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A holder, a waiter interrupted with SIGINT, and a third waiter: once
    /// the holder releases, the third gets in at once, not after the
    /// interrupted waiter's TTL.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_interrupted_waiter_gives_up_its_place_at_once() {
        let server = redis().await;
        let work = tempfile::tempdir().unwrap();
        let (held, go) = (work.path().join("held"), work.path().join("go"));
        let holder_script = format!(
            r#"touch "{}"; while [ ! -e "{}" ]; do sleep 0.01; done"#,
            held.display(),
            go.display()
        );
        let url = server.url();
        let run = |script: &str| {
            let mut run = cmd(Some(&url), "run --ttl 10s jobs/interrupt -- sh -c");
            run.arg(script);
            run
        };
        let mut holder = run(&holder_script);
        let holder = tokio::spawn(async move { output_within(BOUND, &mut holder).await });
        wait_for_file(&held, BOUND).await;

        // The interrupted waiter reaches Redis over a slow link, so giving up
        // its place takes a real round trip, as it does across a network.
        let slow = FaultProxy::start(server.addr().parse().unwrap())
            .await
            .unwrap();
        slow.delay(Duration::from_millis(100));
        let slow_url = format!("redis://{}", slow.addr());
        let waiter = spawn_piped(&mut cmd(
            Some(&slow_url),
            "run --ttl 10s jobs/interrupt -- true",
        ));
        until_queued(&server, "jobs/interrupt", 1).await;
        let interrupted = support::signal_and_wait(waiter, nix::sys::signal::Signal::SIGINT).await;
        assert_eq!(
            interrupted.status.code(),
            Some(130),
            "{}",
            stderr(&interrupted)
        );
        assert_eq!(
            queued(&server, "jobs/interrupt").await,
            0,
            "the interrupted waiter exited without giving up its queue place"
        );

        let mut third = run("true");
        let third = tokio::spawn(async move { output_within(BOUND, &mut third).await });
        until_queued(&server, "jobs/interrupt", 1).await;
        std::fs::write(&go, "").unwrap();
        let released = tokio::time::Instant::now();
        let third = third.await.unwrap();
        assert!(third.status.success(), "{}", stderr(&third));
        assert!(
            released.elapsed() < Duration::from_secs(3),
            "the third waiter got in {:?} after the release",
            released.elapsed()
        );
        assert!(holder.await.unwrap().status.success());
    }

    /// Renewals that fail while the lease still has validity left are a
    /// warning, printed once; when renewal works again, that is said too,
    /// and the command runs on undisturbed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_warns_once_when_renewal_fails_and_again_when_it_recovers() {
        use tokio::io::{AsyncBufReadExt, BufReader};

        let server = redis().await;
        let proxy = FaultProxy::start(server.addr().parse().unwrap())
            .await
            .unwrap();
        // Each renewal gives up after 300 ms: a failure well before the
        // 3 s lease could run out.
        let url = format!("redis://{}?request_timeout=300ms", proxy.addr());
        let work = tempfile::tempdir().unwrap();
        let (held, go) = (work.path().join("held"), work.path().join("go"));
        let mut run = cmd(Some(&url), "run --ttl 3s jobs/health -- sh -c");
        run.arg(format!(
            r#"touch "{}"; while [ ! -e "{}" ]; do sleep 0.02; done"#,
            held.display(),
            go.display()
        ));
        let mut child = spawn_piped(&mut run);
        wait_for_file(&held, BOUND).await;
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut next_line = async || {
            tokio::time::timeout(BOUND, lines.next_line())
                .await
                .expect("a line on stderr")
                .unwrap()
                .expect("stderr open")
        };

        proxy.blackhole();
        let warning = next_line().await;
        assert!(
            warning.contains("warning: renewing lock jobs/health")
                && warning.contains("is failing")
                && warning.contains("of its lease left"),
            "{warning}"
        );
        proxy.restore();
        let recovered = next_line().await;
        assert!(recovered.contains("works again"), "{recovered}");

        std::fs::write(&go, "").unwrap();
        let status = tokio::time::timeout(BOUND, child.wait())
            .await
            .expect("distlock run exits")
            .unwrap();
        assert_eq!(status.code(), Some(0), "the command ran on to its end");
        let rest = lines.next_line().await.unwrap();
        assert_eq!(rest, None, "one warning and one recovery, nothing more");
    }
}
