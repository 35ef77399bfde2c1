//! Helper processes: the test binary run again with [`HELPER_ENV`] set to
//! a task, so a test can put another OS process on the same lock files.
//! The binary's `helper_process` test reads the task and runs it; each test
//! file that uses this module says what its tasks do.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

pub(crate) const HELPER_ENV: &str = "LOCK_FILE_TEST_HELPER";

/// A running helper process; killed when dropped.
pub(crate) struct Helper {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Helper {
    /// Starts `task` (`"flock <path>"`, ...) in a new process.
    pub(crate) fn start(task: &str) -> Helper {
        let exe = std::env::current_exe().expect("path of this test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "helper_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, task)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start a helper process (this test binary)");
        let stdout = child.stdout.take().expect("piped stdout");
        Helper {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// Waits for the helper to print `line` (other output is skipped).
    pub(crate) async fn expect_line(&mut self, line: &str, within: Duration) {
        let found = tokio::time::timeout(within, async {
            while let Some(got) = self.lines.next_line().await.expect("helper stdout") {
                if got.trim() == line {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "helper never printed {line:?}");
    }

    /// Writes `line` to the helper's stdin.
    pub(crate) async fn send(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt as _;
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    /// The rest of the next line the helper prints after `prefix`.
    pub(crate) async fn line_after(&mut self, prefix: &str, within: Duration) -> String {
        tokio::time::timeout(within, async {
            while let Some(got) = self.lines.next_line().await.expect("helper stdout") {
                if let Some(rest) = got.trim().strip_prefix(prefix) {
                    return rest.to_owned();
                }
            }
            panic!("the helper exited without printing {prefix:?}");
        })
        .await
        .unwrap_or_else(|_| panic!("the helper printed no {prefix:?} within {within:?}"))
    }

    /// The value the helper prints after `prefix` on its next such line.
    pub(crate) async fn value_after<T>(&mut self, prefix: &str, within: Duration) -> T
    where
        T: std::str::FromStr<Err: std::fmt::Debug>,
    {
        let text = self.line_after(prefix, within).await;
        text.parse()
            .unwrap_or_else(|e| panic!("the helper printed {prefix}{text:?}: {e:?}"))
    }

    /// Kills the helper and waits until it is gone.
    pub(crate) async fn stop(mut self) {
        self.child.kill().await.expect("kill the helper");
    }
}
