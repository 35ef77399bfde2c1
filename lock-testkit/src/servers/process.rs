//! One supervised child process: spawn, signal, kill, reap, read its log.
//!
//! The command line is fixed at construction, so a restart runs exactly the
//! same server again (same ports, same data directory). Output goes to a log
//! file that is appended to across restarts. Dropping the value kills and
//! reaps the child synchronously, so no runtime is needed.
//!
//! Children stay in the test's process group on purpose: a Ctrl-C on
//! `cargo test` then reaches them too instead of leaving orphans behind.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::LaunchError;

/// How many log lines an error message shows.
const TAIL_LINES: usize = 40;
/// How long `kill` polls for the child to exit before blocking on it.
const REAP_POLL: Duration = Duration::from_secs(5);

/// A child process with a fixed command line and a log file.
#[derive(Debug)]
pub(crate) struct ChildProcess {
    label: String,
    program: PathBuf,
    args: Args,
    cwd: PathBuf,
    log_path: PathBuf,
    state: Mutex<State>,
}

/// The arguments of a command line; `Debug` only counts them, since they
/// may hold a password.
struct Args(Vec<OsString>);

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} arguments>", self.0.len())
    }
}

#[derive(Debug, Default)]
struct State {
    child: Option<Child>,
    paused: bool,
}

impl ChildProcess {
    /// Describes a process that runs in `dir` and logs to the file `log`
    /// there; nothing runs until [`ChildProcess::spawn`].
    pub(crate) fn new(
        label: String,
        program: PathBuf,
        args: Vec<OsString>,
        dir: &Path,
        log: &str,
    ) -> Self {
        Self {
            label,
            program,
            args: Args(args),
            cwd: dir.to_owned(),
            log_path: dir.join(log),
            state: Mutex::new(State::default()),
        }
    }

    /// A human-readable name, e.g. `etcd member n1 (127.0.0.1:23790)`.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The file that receives the child's stdout and stderr.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Starts the process, killing a previous incarnation first.
    pub(crate) fn spawn(&self) -> Result<(), LaunchError> {
        let mut state = self.state();
        if let Some(mut old) = state.child.take() {
            reap(&mut old);
        }
        state.paused = false;
        let io_error = |source| LaunchError::Io {
            what: self.label.clone(),
            source,
        };
        let mut log = self.open_log().map_err(io_error)?;
        writeln!(
            log,
            "=== distlock-testkit: starting {}: {}",
            self.label,
            self.command_line()
        )
        .map_err(io_error)?;
        let stderr = log.try_clone().map_err(io_error)?;
        let child = Command::new(&self.program)
            .args(&self.args.0)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(io_error)?;
        state.child = Some(child);
        Ok(())
    }

    /// Sends `SIGKILL` and waits until the child is reaped. Does nothing if
    /// it is not running.
    pub(crate) async fn kill(&self) {
        let Some(mut child) = self.state().child.take() else {
            return;
        };
        let _ = child.kill();
        let deadline = Instant::now() + REAP_POLL;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = child.wait();
    }

    /// Sends `SIGSTOP` (the process freezes; its sockets stay open).
    pub(crate) fn pause(&self) {
        let mut state = self.state();
        if state.signal(Signal::SIGSTOP) {
            state.paused = true;
        }
    }

    /// Sends `SIGCONT` to a paused process.
    pub(crate) fn resume(&self) {
        let mut state = self.state();
        if state.signal(Signal::SIGCONT) {
            state.paused = false;
        }
    }

    /// The pid of the live child, if one runs.
    pub(crate) fn pid(&self) -> Option<i32> {
        let mut state = self.state();
        if !state.is_alive() {
            return None;
        }
        i32::try_from(state.child.as_ref()?.id()).ok()
    }

    /// Whether the process is alive (a paused process is alive).
    pub(crate) fn is_running(&self) -> bool {
        self.state().is_alive()
    }

    /// Whether the process is alive and stopped by [`ChildProcess::pause`].
    pub(crate) fn is_paused(&self) -> bool {
        let mut state = self.state();
        state.paused && state.is_alive()
    }

    /// The exit status, if the process was spawned and has exited.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        self.state().child.as_mut()?.try_wait().ok().flatten()
    }

    /// The last lines of the log file (or a note saying it is unreadable).
    pub(crate) fn log_tail(&self) -> String {
        match fs::read(&self.log_path) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
            }
            Err(err) => format!("(log unreadable: {err})"),
        }
    }

    fn open_log(&self) -> std::io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
    }

    fn command_line(&self) -> String {
        let mut line = self.program.display().to_string();
        for arg in &self.args.0 {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn is_alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Signals a live child; returns whether the signal was sent.
    fn signal(&mut self, signal: Signal) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        // An exited but unreaped child keeps its pid, so this cannot hit a
        // recycled pid; after try_wait reaps it we never signal again.
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        let Ok(pid) = i32::try_from(child.id()) else {
            return false;
        };
        kill(Pid::from_raw(pid), signal).is_ok()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.state().child.take() {
            reap(&mut child);
        }
    }
}

/// `SIGKILL` then a blocking wait; `SIGKILL` also ends a stopped process.
fn reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs a short-lived tool (openssl, etcdctl) to completion. `what` names
/// it in the error, which carries the tool's own output; keep secrets out
/// of `what`.
pub(crate) fn run_tool(command: Command, what: String) -> Result<(), LaunchError> {
    let output = tool_output(command, &what)?;
    if output.status.success() {
        return Ok(());
    }
    Err(LaunchError::Io {
        what,
        source: std::io::Error::other(format!(
            "{}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    })
}

/// Runs a short-lived tool with no stdin and collects its output; `Err`
/// only when it could not be started, so callers judge the exit status.
pub(crate) fn tool_output(mut command: Command, what: &str) -> Result<Output, LaunchError> {
    command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LaunchError::Io {
            what: what.to_owned(),
            source,
        })
}

/// Gives a launcher's member type (one with a `process: ChildProcess` field
/// and an inherent `restart`) the same `kill`, `pause`, `resume`,
/// `is_running` and `is_paused` methods, so that every server kind is
/// controlled alike, and implements [`Member`](super::Member) with them.
macro_rules! process_controls {
    ($member:ty) => {
        impl $crate::servers::Member for $member {
            fn kill(&self) -> futures::future::BoxFuture<'_, ()> {
                Box::pin(self.process.kill())
            }

            fn restart(
                &self,
            ) -> futures::future::BoxFuture<'_, Result<(), $crate::servers::LaunchError>> {
                // The inherent `restart`, which knows how this kind comes up.
                Box::pin(<$member>::restart(self))
            }

            fn pause(&self) {
                self.process.pause();
            }

            fn resume(&self) {
                self.process.resume();
            }
        }

        impl $member {
            /// Kills the server with `SIGKILL` and waits until it is reaped.
            pub async fn kill(&self) {
                self.process.kill().await;
            }

            /// Freezes the server with `SIGSTOP`; its connections stay open
            /// but it answers nothing (no replies, no heartbeats to peers).
            pub fn pause(&self) {
                self.process.pause();
            }

            /// Unfreezes a paused server with `SIGCONT`.
            pub fn resume(&self) {
                self.process.resume();
            }

            /// Whether the process is alive (paused counts as alive).
            pub fn is_running(&self) -> bool {
                self.process.is_running()
            }

            /// Whether the process is alive and paused.
            pub fn is_paused(&self) -> bool {
                self.process.is_paused()
            }
        }
    };
}
pub(crate) use process_controls;
