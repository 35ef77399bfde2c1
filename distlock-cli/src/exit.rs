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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

use Topic::{All, Bench, Break, Elect, Ls, Run, Status};

/// Every code `--help` lists, in order: the help topics that show it and
/// its line (or lines). A code that means something different to some
/// commands has a row per meaning; each command lists only the codes it can
/// give, and the top-level help lists them all.
const CODES: &[(&[Topic], &str)] = &[
    (
        &[All],
        "  0-255  distlock run: the command's own exit status (128+N if it died of signal N)",
    ),
    (
        &[Run],
        "  0-255  the command's own exit status (128+N if it died of signal N)",
    ),
    (
        &[Elect],
        "  0      resigned or stopped listening after SIGINT or SIGTERM",
    ),
    (
        &[Bench],
        "  0      every backend ran without error or mutual-exclusion violation",
    ),
    (&[Status], "  0      the lock is held (its holder is shown)"),
    (
        &[Ls],
        "  0      listed; with no match, \"no locks under PREFIX\" on stderr",
    ),
    (
        &[Break],
        "  0      the holder was evicted; its token is printed",
    ),
    (
        &[All],
        "  1      status: the lock is free; break: the lock was free, nothing was broken",
    ),
    (&[Status], "  1      the lock is free"),
    (&[Break], "  1      the lock was free; nothing was broken"),
    (
        &[All],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid lock name, --ttl 0, memory://, missing `-- COMMAND`,
         break without --yes, an operation the backend does not implement",
    ),
    (
        &[Run],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid lock name, --ttl 0, memory://, missing `-- COMMAND`,
         --permits 0, --permits/--shared/--exclusive together, a semaphore limit
         other than its holders', no semaphores or read-write locks on the backend",
    ),
    (
        &[Elect],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid name, --ttl 0, memory://, no leader election",
    ),
    (
        &[Bench],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, --plot not ending in .svg",
    ),
    (
        &[Status],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid name, memory://, an operation the backend does not
         implement",
    ),
    (
        &[Ls],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, memory://, an operation the backend does not implement",
    ),
    (
        &[Break],
        "  64     usage error: bad arguments, malformed URL, unknown scheme, backend not
         compiled in, invalid name, memory://, break without --yes, an operation
         the backend does not implement",
    ),
    (
        &[All, Run, Elect, Status, Ls, Break],
        "  69     backend unavailable: unreachable server, timeout, backend error",
    ),
    (
        &[Bench],
        "  69     a backend failed or violated mutual exclusion (see the table)",
    ),
    (
        &[All, Bench],
        "  73     bench: the --json or --plot file could not be created or written",
    ),
    (
        &[All, Run],
        "  75     lock not acquired within --wait (held by someone else)",
    ),
    (
        &[All],
        "  76     lock or leadership lost while held; the command got SIGTERM once less
         than --grace of the lease was left (or when the lock was lost), then
         SIGKILL before the lock could pass to another holder",
    ),
    (
        &[Run],
        "  76     lock lost while held; the command got SIGTERM once less than --grace
         of the lease was left (or when the lock was lost), then SIGKILL before
         the lock could pass to another holder",
    ),
    (&[Elect], "  76     leadership lost while held"),
    (
        &[All, Run, Elect, Status, Ls, Break],
        "  77     the backend rejected the credentials",
    ),
    (&[All, Run], "  126    the command could not be executed"),
    (&[All, Run], "  127    the command was not found"),
    (
        &[All],
        "  130    SIGINT while waiting for a lock or leadership (its place was given up)",
    ),
    (
        &[Run],
        "  130    SIGINT while waiting for the lock (its queue place was given up)",
    ),
    (
        &[Elect],
        "  130    SIGINT while campaigning (its place was given up)",
    ),
    (
        &[All],
        "  143    SIGTERM while waiting for a lock or leadership (its place was given up)",
    ),
    (
        &[Run],
        "  143    SIGTERM while waiting for the lock (its queue place was given up)",
    ),
    (
        &[Elect],
        "  143    SIGTERM while campaigning (its place was given up)",
    ),
];

/// The exit-code table shown at the end of `--help`.
pub(crate) fn help(topic: Topic) -> String {
    let lines: Vec<&str> = CODES
        .iter()
        .filter(|(topics, _)| topics.contains(&topic))
        .map(|(_, line)| *line)
        .collect();
    let mut text = format!("Exit codes:\n{}", lines.join("\n"));
    if topic == All {
        text.push_str("\n`distlock COMMAND --help` lists the codes COMMAND can give.");
        text.push_str(&settings_help());
    }
    text
}

/// The settings a config file or the environment can give, from the one
/// table of them.
fn settings_help() -> String {
    let mut text = format!(
        "\n\nSettings (config file key, environment variable):\n  {:<16} {:<25} backend URL",
        "url",
        distlock::URL_ENV
    );
    for spec in distlock::SETTINGS {
        text.push_str(&format!(
            "\n  {:<16} {:<25} {}",
            spec.name, spec.env, spec.about
        ));
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
