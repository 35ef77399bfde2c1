//! Exit codes, and turning errors into one line on stderr plus a code.

use std::process::ExitCode;

use distlock::{Error, ErrorKind};

/// `status`: the lock is free; `break`: nobody held it.
pub(crate) const FREE: u8 = 1;
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
/// An output file (`bench --json`, `--plot`) could not be created or
/// written (sysexits `EX_CANTCREAT`).
pub(crate) const CANNOT_CREATE: u8 = 73;

/// Which command's exit codes to list.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Topic {
    /// `distlock --help`: every code, and where each command's are.
    All,
    Run,
    Elect,
    Bench,
    Status,
    Ls,
    Break,
}

// One line (or a few) per code. Each command lists only the codes it can
// give; the top-level help lists them all.
const RUN_STATUS: &str = "  0-255  the command's own exit status (128+N if it died of signal N)";
const ELECT_SUCCESS: &str = "  0      resigned or stopped listening after SIGINT or SIGTERM";
const BENCH_SUCCESS: &str =
    "  0      every backend ran without error or mutual-exclusion violation";
const USAGE_RUN: &str =
    "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid lock name, --ttl 0, memory://, missing `-- COMMAND`";
const USAGE_ALL: &str =
    "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid lock name, --ttl 0, memory://, missing `-- COMMAND`,
         break without --yes, an operation the backend does not implement";
const USAGE_ELECT: &str =
    "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid name, --ttl 0, memory://, no leader election";
const USAGE_BENCH: &str =
    "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, --plot not ending in .svg";
const STATUS_HELD: &str = "  0      the lock is held (its holder is shown)";
const STATUS_FREE: &str = "  1      the lock is free";
const LS_SUCCESS: &str = "  0      listed (possibly nothing)";
const BREAK_EVICTED: &str = "  0      the holder was evicted; its token is printed";
const BREAK_FREE: &str = "  1      the lock was free; nothing was broken";
const FREE_ANY: &str =
    "  1      status: the lock is free; break: the lock was free, nothing was broken";
const USAGE_OPS: &str =
    "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid name, memory://, break without --yes, an operation
         the backend does not implement";
const BACKEND: &str = "  69     backend unavailable: unreachable server, timeout, backend error";
const BACKEND_BENCH: &str =
    "  69     a backend failed or violated mutual exclusion (see the table)";
const CANNOT_CREATE_LINE: &str =
    "  73     bench: the --json or --plot file could not be created or written";
const NOT_ACQUIRED_LINE: &str = "  75     lock not acquired within --wait (held by someone else)";
const LOST_RUN: &str =
    "  76     lock lost while held; the command got SIGTERM once less than --grace
         of the lease was left (or when the lock was lost), then SIGKILL before
         the lock could pass to another holder";
const LOST_ELECT: &str = "  76     leadership lost while held";
const LOST_ANY: &str =
    "  76     lock or leadership lost while held; the command got SIGTERM once less
         than --grace of the lease was left (or when the lock was lost), then
         SIGKILL before the lock could pass to another holder";
const CREDENTIALS: &str = "  77     the backend rejected the credentials";
const CANNOT_EXECUTE_LINE: &str = "  126    the command could not be executed";
const NOT_FOUND_LINE: &str = "  127    the command was not found";
const SIGINT_RUN: &str =
    "  130    SIGINT while waiting for the lock (its queue place was given up)";
const SIGTERM_RUN: &str =
    "  143    SIGTERM while waiting for the lock (its queue place was given up)";
const SIGINT_ELECT: &str = "  130    SIGINT while campaigning (its place was given up)";
const SIGTERM_ELECT: &str = "  143    SIGTERM while campaigning (its place was given up)";
const SIGINT_ANY: &str =
    "  130    SIGINT while waiting for a lock or leadership (its place was given up)";
const SIGTERM_ANY: &str =
    "  143    SIGTERM while waiting for a lock or leadership (its place was given up)";

/// The exit-code table shown at the end of `--help`.
pub(crate) fn help(topic: Topic) -> String {
    let lines: &[&str] = match topic {
        Topic::All => &[
            "  0-255  distlock run: the command's own exit status (128+N if it died of signal N)",
            FREE_ANY,
            USAGE_ALL,
            BACKEND,
            CANNOT_CREATE_LINE,
            NOT_ACQUIRED_LINE,
            LOST_ANY,
            CREDENTIALS,
            CANNOT_EXECUTE_LINE,
            NOT_FOUND_LINE,
            SIGINT_ANY,
            SIGTERM_ANY,
        ],
        Topic::Run => &[
            RUN_STATUS,
            USAGE_RUN,
            BACKEND,
            NOT_ACQUIRED_LINE,
            LOST_RUN,
            CREDENTIALS,
            CANNOT_EXECUTE_LINE,
            NOT_FOUND_LINE,
            SIGINT_RUN,
            SIGTERM_RUN,
        ],
        Topic::Elect => &[
            ELECT_SUCCESS,
            USAGE_ELECT,
            BACKEND,
            LOST_ELECT,
            CREDENTIALS,
            SIGINT_ELECT,
            SIGTERM_ELECT,
        ],
        Topic::Bench => &[
            BENCH_SUCCESS,
            USAGE_BENCH,
            BACKEND_BENCH,
            CANNOT_CREATE_LINE,
        ],
        Topic::Status => &[STATUS_HELD, STATUS_FREE, USAGE_OPS, BACKEND, CREDENTIALS],
        Topic::Ls => &[LS_SUCCESS, USAGE_OPS, BACKEND, CREDENTIALS],
        Topic::Break => &[BREAK_EVICTED, BREAK_FREE, USAGE_OPS, BACKEND, CREDENTIALS],
    };
    let mut text = format!("Exit codes:\n{}", lines.join("\n"));
    if let Topic::All = topic {
        text.push_str("\n`distlock COMMAND --help` lists the codes COMMAND can give.");
    }
    text
}

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
