//! `distlock status`, `ls` and `break` operating locks held by other
//! `distlock run` processes: the holder's label, the exit codes, and a
//! break that ends the other process's run with 76 and a higher next token.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{BOUND, FREE, LOST, USAGE, cmd, file_fixture, output_within, stderr, wait_for_file};
use tokio::process::Child;

/// The holders' lease: renewed every third of it, so a break is noticed
/// within about 700 ms, and long enough for renewals to keep up on a busy
/// two-core machine.
const TTL: &str = "2s";
const TTL_MS: u64 = 2000;

/// A fresh lock directory; records are not `fsync`ed, which these tests do
/// not need and which would slow renewals under load.
fn fixture() -> support::Fixture {
    let dir = file_fixture();
    let url = format!("{}?fsync=false", dir.url);
    support::Fixture::new(url, dir)
}

/// A `distlock run NAME` in its own process, holding the lock until told to
/// stop (or until it loses it). Its command writes DISTLOCK_TOKEN to a file.
struct Holder {
    child: Child,
    token_file: PathBuf,
    stop: PathBuf,
    _work: tempfile::TempDir,
}

impl Holder {
    async fn start(url: &str, name: &str, env: &[(&str, &str)]) -> Holder {
        let work = tempfile::tempdir().unwrap();
        let token_file = work.path().join("token");
        let stop = work.path().join("stop");
        let script = format!(
            r#"echo "$DISTLOCK_TOKEN" > "{token}.tmp" && mv "{token}.tmp" "{token}"; while [ ! -e "{stop}" ]; do sleep 0.05; done"#,
            token = token_file.display(),
            stop = stop.display()
        );
        let mut cmd = cmd(Some(url), &format!("run --ttl {TTL} {name} -- sh -c"));
        cmd.arg(&script);
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = cmd.spawn().expect("spawn distlock run");
        wait_for_file(&token_file, BOUND).await;
        Holder {
            child,
            token_file,
            stop,
            _work: work,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    fn token(&self) -> u64 {
        read_token(&self.token_file)
    }

    /// Lets the command finish and returns how `distlock run` exited.
    async fn finish(self) -> Output {
        std::fs::write(&self.stop, b"").unwrap();
        self.exited().await
    }

    async fn exited(self) -> Output {
        tokio::time::timeout(BOUND, self.child.wait_with_output())
            .await
            .expect("distlock run did not exit")
            .expect("wait for distlock run")
    }
}

fn read_token(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// `distlock --url URL WORDS…` within [`BOUND`].
async fn cli(url: &str, words: &str) -> Output {
    support::cli(Some(url), words).await
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)))
}

#[tokio::test]
async fn status_shows_the_run_of_another_process_then_free() {
    let fixture = fixture();
    let holder = Holder::start(&fixture.url, "jobs/status", &[]).await;

    let shown = cli(&fixture.url, "status jobs/status --json").await;
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let status = json(&shown);
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["holder"]["token"], holder.token(), "{status}");
    let label = status["holder"]["description"].as_str().unwrap();
    assert!(
        label.starts_with("distlock run sh -c ") && label.ends_with(&format!(":{}", holder.pid())),
        "{label}"
    );
    let left = status["holder"]["lease_left_ms"].as_u64().unwrap();
    assert!(left <= TTL_MS, "{status}");
    assert!(status["holder"]["acquired_at"].is_string(), "{status}");

    let text = cli(&fixture.url, "status jobs/status").await;
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(": held") && text.contains(label), "{text}");

    let ran = holder.finish().await;
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let free = cli(&fixture.url, "status jobs/status").await;
    assert_eq!(free.status.code(), Some(FREE), "{}", stderr(&free));
    assert!(String::from_utf8_lossy(&free.stdout).contains(": free"));
}

#[tokio::test]
async fn ls_lists_the_held_names_under_a_prefix_and_holder_labels_come_from_the_env() {
    let fixture = fixture();
    let labelled = [("DISTLOCK_HOLDER", "billing-worker-3")];
    let a = Holder::start(&fixture.url, "jobs/a", &labelled).await;
    let b = Holder::start(&fixture.url, "jobs/b/c", &[]).await;
    let other = Holder::start(&fixture.url, "other", &[]).await;

    let listed = cli(&fixture.url, "ls jobs/ --json").await;
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let entries = json(&listed);
    let names: Vec<(&str, u64)> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["token"].as_u64().unwrap()))
        .collect();
    assert_eq!(names, [("jobs/a", a.token()), ("jobs/b/c", b.token())]);
    let text = cli(&fixture.url, "ls").await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("other token="), "{text}");

    let status = cli(&fixture.url, "status jobs/a --json").await;
    assert_eq!(json(&status)["holder"]["description"], "billing-worker-3");

    for holder in [a, b, other] {
        assert_eq!(holder.finish().await.status.code(), Some(0));
    }
    let empty = cli(&fixture.url, "ls jobs/").await;
    assert_eq!(empty.status.code(), Some(0), "{}", stderr(&empty));
    assert!(
        empty.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&empty.stdout)
    );
    assert_eq!(stderr(&empty), "distlock: no locks under \"jobs/\"\n");
}

#[tokio::test]
async fn break_evicts_the_run_of_another_process_which_exits_76_and_the_next_token_is_higher() {
    breaks_the_run_of_another_process(fixture()).await;
}

support::test_on_backends! {
    #[tokio::test]
    breaks_the_run_of_another_process: etcd, redis, redlock, zk, postgres, mysql
}

/// `break` refuses without `--yes`; with it, evicts the holder a `distlock
/// run` of another process started on the fixture, which exits 76, and the next
/// run's token is higher.
async fn breaks_the_run_of_another_process(fixture: support::Fixture) {
    let url = fixture.url.as_str();
    let holder = Holder::start(url, "jobs/stuck", &[]).await;
    let evicted_token = holder.token();

    let refused = cli(url, "break jobs/stuck").await;
    assert_eq!(refused.status.code(), Some(USAGE), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--yes"), "{err}");
    let still = cli(url, "status jobs/stuck").await;
    assert_eq!(still.status.code(), Some(0), "refused, yet not held");

    let broke = cli(url, "break jobs/stuck --yes").await;
    assert_eq!(broke.status.code(), Some(0), "{}", stderr(&broke));
    let out = String::from_utf8_lossy(&broke.stdout);
    assert!(
        out.contains(&format!("evicted token={evicted_token} ")),
        "{out}"
    );
    // The broken run notices at its next renewal (a third of its TTL).
    let ran = holder.exited().await;
    assert_eq!(ran.status.code(), Some(LOST), "{}", stderr(&ran));
    assert!(
        stderr(&ran).contains("broken or revoked"),
        "{}",
        stderr(&ran)
    );

    let next = output_within(
        BOUND,
        cmd(Some(url), "run --wait 5s jobs/stuck -- sh -c").arg("echo $DISTLOCK_TOKEN"),
    )
    .await;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    let token = support::token(&next);
    assert!(
        token > evicted_token,
        "{token} after evicted {evicted_token}"
    );

    let free = cli(url, "break jobs/stuck --yes").await;
    assert_eq!(free.status.code(), Some(FREE), "{}", stderr(&free));
}

support::test_on_backends! {
    #[tokio::test]
    sees_and_breaks_an_election: file, etcd, redis, redlock, zk, postgres, mysql
}

/// A leader elected by `distlock elect` in another process: `status` shows
/// it as an election led by its value (exit 0), `break --yes` evicts it
/// (exit 0) and the elect process exits 76; then the name is free.
async fn sees_and_breaks_an_election(fixture: support::Fixture) {
    use tokio::io::{AsyncBufReadExt as _, BufReader};

    let url = fixture.url.as_str();
    let mut elect = cmd(Some(url), &format!("elect --ttl {TTL} jobs/sched node-a"));
    let mut leader = support::spawn_piped(&mut elect);
    let mut lines = BufReader::new(leader.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(BOUND, lines.next_line())
        .await
        .expect("elected within the bound")
        .unwrap()
        .expect("an elected line");
    let token: u64 = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("token="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {line:?}"));

    let shown = cli(url, "status jobs/sched --json").await;
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let status = json(&shown);
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["primitive"], "election", "{status}");
    assert_eq!(status["holder"]["token"], token, "{status}");
    assert_eq!(status["holder"]["description"], "node-a", "{status}");
    let text = cli(url, "status jobs/sched").await;
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("election jobs/sched on "), "{text}");
    assert!(text.contains("leader:     node-a"), "{text}");

    let broke = cli(url, "break jobs/sched --yes").await;
    assert_eq!(broke.status.code(), Some(0), "{}", stderr(&broke));
    let out = String::from_utf8_lossy(&broke.stdout);
    assert!(out.contains(&format!("evicted token={token} ")), "{out}");
    assert!(out.contains("holder=node-a"), "{out}");
    let lost = tokio::time::timeout(BOUND, leader.wait_with_output())
        .await
        .expect("the broken leader exits")
        .unwrap();
    assert_eq!(lost.status.code(), Some(LOST), "{}", stderr(&lost));

    let free = cli(url, "status jobs/sched").await;
    assert_eq!(free.status.code(), Some(FREE), "{}", stderr(&free));
}

/// Each command's help is its own: only `break` mentions --yes among its
/// usage errors, only `bench` says --url is given once per backend, and
/// the scheme list names every scheme.
#[tokio::test]
async fn help_texts_belong_to_their_command() {
    for command in ["status", "ls", "break", "run", "elect", "bench"] {
        let output = support::cli(None, &format!("{command} --help")).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let help = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            help.contains("break without --yes"),
            command == "break",
            "{command}:\n{help}"
        );
        assert_eq!(
            help.contains("once per backend"),
            command == "bench",
            "{command}:\n{help}"
        );
        assert!(!help.contains("Repeat it"), "{command}:\n{help}");
        for scheme in ["etcds://", "rediss+cluster://", "redis+cluster://", "zk://"] {
            assert!(help.contains(scheme), "{command} lacks {scheme}:\n{help}");
        }
    }
}
