//! Exit codes, and turning errors into one line on stderr plus a code.

use std::process::ExitCode;

use distlock::{Error, ErrorKind};

/// Bad arguments or configuration: malformed URL, unknown scheme, backend not
/// compiled in, invalid name, zero TTL, missing command (sysexits `EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// The backend is unreachable, timed out, or failed (sysexits `EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// The lock was not acquired within `--wait` (sysexits `EX_TEMPFAIL`: try again later).
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The lock (or leadership) was lost while the command ran.
pub(crate) const LOST: u8 = 76;
/// The backend rejected the credentials (sysexits `EX_NOPERM`).
pub(crate) const UNAUTHORIZED: u8 = 77;
/// Interrupted (SIGINT) while waiting for the lock, as shells report it.
pub(crate) const INTERRUPTED: u8 = 130;
/// Terminated (SIGTERM) while waiting for the lock, as shells report it.
pub(crate) const TERMINATED: u8 = 143;
/// The command was found but could not be executed (as in shells).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as in shells).
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-code table shown at the end of `--help`.
pub(crate) const HELP: &str = "\
Exit codes:
  0-255  distlock run: the command's own exit status (128+N if it died of signal N)
  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid lock name, --ttl 0, missing `-- COMMAND`
  69     backend unavailable: unreachable server, timeout, backend error
  75     lock not acquired within --wait (held by someone else)
  76     lock or leadership lost while held; the command got SIGTERM once less
         than --grace of the lease was left (or when the lock was lost), then
         SIGKILL before the lock could pass to another holder
  77     the backend rejected the credentials
  126    the command could not be executed
  127    the command was not found
  130    SIGINT while waiting for the lock (its queue place was given up)
  143    SIGTERM while waiting for the lock (its queue place was given up)";

/// A failure that ends the program: a code and a one-line message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }

    /// Prints the message as one line on stderr and returns the code.
    pub(crate) fn report(self) -> ExitCode {
        eprintln!("distlock: {}", one_line(&self.message));
        ExitCode::from(self.code)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match e.kind() {
            ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => USAGE,
            ErrorKind::WouldBlock => NOT_ACQUIRED,
            ErrorKind::LeaseLost | ErrorKind::NotHeld => LOST,
            ErrorKind::Unauthorized => UNAUTHORIZED,
            _ => UNAVAILABLE,
        };
        Failure::new(code, e.to_string())
    }
}

/// Collapses a multi-line message into one line.
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
