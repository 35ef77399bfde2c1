//! The command run under the lock: spawning it and signalling it.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::exit::{CANNOT_EXECUTE, Failure, NOT_FOUND};

/// Starts `command` with the lock's details in its environment.
pub(crate) fn spawn(command: &[OsString], env: &[(&str, String)]) -> Result<Child, Failure> {
    let (program, args) = command.split_first().expect("checked non-empty");
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.spawn().map_err(|e| {
        let shown = program.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => Failure::new(
                NOT_FOUND,
                format!("cannot run {shown:?}: command not found"),
            ),
            _ => Failure::new(CANNOT_EXECUTE, format!("cannot run {shown:?}: {e}")),
        }
    })
}

/// Sends `signal` to the child if it is still running.
pub(crate) fn signal(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok())
        && let Err(e) = kill(Pid::from_raw(pid), signal)
    {
        tracing::debug!(pid, %signal, error = %e, "could not signal the command");
    }
}

/// The shell convention: the exit code, or 128 + N for death by signal N.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}
