//! The file backend's default directory is machine-wide: jobs of different
//! users on one machine exclude each other without any URL.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use support::{BOUND, DISTLOCK, NOT_ACQUIRED, cmd, output_within, stderr, token};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const MACHINE_DIR: &str = "/var/tmp/distlock";

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn unique(name: &str) -> String {
    format!("machine/{name}-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn run_without_a_url_uses_the_machine_wide_directory() {
    let name = unique("default");
    let output = output_within(
        BOUND,
        cmd(None, &format!("run {name} -- sh -c"))
            .arg("echo $DISTLOCK_KEY")
            .env_remove("HOME")
            .env_remove("XDG_STATE_HOME"),
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let key = String::from_utf8_lossy(&output.stdout);
    let locks = Path::new(MACHINE_DIR).join("locks");
    assert!(key.starts_with(&locks.display().to_string()), "{key}");
    assert_eq!(mode(Path::new(MACHINE_DIR)), 0o1777);
    assert_eq!(mode(&locks), 0o777);
}

/// A user of the machine, running `distlock` as a copy every user can
/// execute (the build's own may be in a directory only its owner can enter).
struct User {
    name: &'static str,
    uid: u32,
    gid: u32,
    binary: PathBuf,
}

impl User {
    fn distlock(&self, words: &str) -> Command {
        let mut cmd = Command::new(&self.binary);
        for var in distlock::env_vars().chain(["DISTLOCK_CONFIG", "DISTLOCK_LOG"]) {
            cmd.env_remove(var);
        }
        cmd.args(words.split_whitespace())
            .env("HOME", "/nonexistent")
            .env_remove("XDG_STATE_HOME")
            .current_dir("/")
            .uid(self.uid)
            .gid(self.gid)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `words` to completion; returns the token its job printed.
    async fn take(&self, name: &str) -> u64 {
        let output = self
            .run(&format!("run {name} -- sh -c"), "echo $DISTLOCK_TOKEN")
            .await;
        assert!(
            output.status.success(),
            "{}: {}",
            self.name,
            stderr(&output)
        );
        token(&output)
    }

    async fn run(&self, words: &str, script: &str) -> Output {
        output_within(BOUND, self.distlock(words).arg(script)).await
    }
}

fn users(binary: &Path) -> [User; 2] {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs jobs as the users nobody and daemon: run it as root"
    );
    let user = |name: &'static str| {
        let found = nix::unistd::User::from_name(name)
            .unwrap()
            .unwrap_or_else(|| panic!("no user {name} on this machine"));
        User {
            name,
            uid: found.uid.as_raw(),
            gid: found.gid.as_raw(),
            binary: binary.to_owned(),
        }
    };
    [user("nobody"), user("daemon")]
}

#[tokio::test]
async fn two_users_jobs_exclude_each_other_in_the_default_directory() {
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let binary = bin_dir.path().join("distlock");
    std::fs::copy(DISTLOCK, &binary).unwrap();
    let [nobody, daemon] = users(&binary);
    let name = unique("two-users");

    // nobody creates the lock's files, then holds the lock until its stdin closes.
    let first = nobody.take(&name).await;
    let mut holder = nobody.distlock(&format!("run {name} -- sh -c"));
    holder
        .arg("echo $DISTLOCK_TOKEN; cat >/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let held: u64 = tokio::time::timeout(BOUND, lines.next_line())
        .await
        .expect("nobody's job did not start")
        .unwrap()
        .expect("nobody's job printed no token")
        .parse()
        .unwrap();
    assert!(held > first, "the token went back from {first} to {held}");

    // daemon is kept out while nobody holds it.
    let refused = daemon
        .run(&format!("run --wait 1s {name} -- sh -c"), "true")
        .await;
    assert_eq!(
        refused.status.code(),
        Some(NOT_ACQUIRED),
        "{}",
        stderr(&refused)
    );

    // nobody's job ends; daemon takes the lock, replacing nobody's record.
    drop(holder.stdin.take());
    let status = tokio::time::timeout(BOUND, holder.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "nobody's job failed: {status}");
    let next = daemon.take(&name).await;
    assert!(next > held, "the token went back from {held} to {next}");

    // And nobody again, over daemon's record.
    let last = nobody.take(&name).await;
    assert!(last > next, "the token went back from {next} to {last}");
}
