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
    /// `distlock --help`: every code, each with the commands that give it.
    All,
    Run,
    Elect,
    Bench,
    Status,
    Ls,
    Break,
}

use Topic::{All, Bench, Break, Elect, Ls, Run, Status};

/// Every command, in the order the help names them.
const COMMANDS: [Topic; 6] = [Run, Elect, Bench, Status, Ls, Break];

impl Topic {
    fn command(self) -> &'static str {
        match self {
            All => "distlock",
            Run => "run",
            Elect => "elect",
            Bench => "bench",
            Status => "status",
            Ls => "ls",
            Break => "break",
        }
    }
}

/// One row of the exit-code table: a code (or range), the commands that
/// give it with this meaning, and the meaning.
struct Code {
    code: &'static str,
    commands: &'static [Topic],
    meaning: &'static str,
}

const fn code(code: &'static str, commands: &'static [Topic], meaning: &'static str) -> Code {
    Code {
        code,
        commands,
        meaning,
    }
}

/// The one exit-code table: every `--help` lists its rows, and docs/cli.md
/// states it (a test compares them). A code that means something different
/// to some commands, or has causes only some commands meet, has a row per
/// meaning; each command lists only its own rows.
const CODES: &[Code] = &[
    code(
        "0-255",
        &[Run],
        "the command's own exit status (128+N if it died of signal N)",
    ),
    code(
        "0",
        &[Elect],
        "resigned or stopped listening after SIGINT or SIGTERM",
    ),
    code(
        "0",
        &[Bench],
        "every backend ran without error or mutual-exclusion violation",
    ),
    code("0", &[Status], "the lock is held (its holder is shown)"),
    code(
        "0",
        &[Ls],
        "listed; with no match, \"no locks under PREFIX\" on stderr",
    ),
    code(
        "0",
        &[Break],
        "the holder was evicted; its token is printed",
    ),
    code("1", &[Status], "the lock is free"),
    code("1", &[Break], "the lock was free; nothing was broken"),
    code(
        "64",
        &COMMANDS,
        "usage error: bad arguments, a malformed URL or setting, an unknown scheme, \
         a backend not compiled in",
    ),
    code(
        "64",
        &[Run, Elect, Status, Ls, Break],
        "memory:// (its locks live in one process), a setting the backend has no use \
         for, an operation the backend does not implement",
    ),
    code("64", &[Run, Elect, Status, Break], "an invalid name"),
    code(
        "64",
        &[Run, Elect, Bench],
        "a --ttl below the backend's minimum",
    ),
    code(
        "64",
        &[Run],
        "missing `-- COMMAND`, --grace over half the TTL, --permits 0, \
         --permits/--shared/--exclusive together, a semaphore limit other than its \
         holders', no semaphores or read-write locks on the backend",
    ),
    code("64", &[Elect], "no leader election on the backend"),
    code("64", &[Break], "break without --yes"),
    code("64", &[Bench], "--plot not ending in .svg"),
    code(
        "69",
        &[Run, Elect, Status, Ls, Break],
        "backend unavailable: unreachable server (also when run's --wait ends on a server \
         that does not answer), timeout, backend error",
    ),
    code(
        "69",
        &[Bench],
        "a backend failed or violated mutual exclusion (see the table)",
    ),
    code(
        "73",
        &[Bench],
        "the --json or --plot file could not be created or written",
    ),
    code(
        "75",
        &[Run],
        "lock not acquired within --wait: the server answers, and someone else holds it",
    ),
    code(
        "76",
        &[Run],
        "lock lost while held; the command got SIGTERM once less than --grace of the \
         lease was left (or when the lock was lost), then SIGKILL before the lock \
         could pass to another holder",
    ),
    code("76", &[Elect], "leadership lost while held"),
    code(
        "77",
        &[Run, Elect, Status, Ls, Break],
        "the backend rejected the credentials",
    ),
    code("126", &[Run], "the command could not be executed"),
    code("127", &[Run], "the command was not found"),
    code(
        "130",
        &[Run],
        "SIGINT while waiting for the lock (its queue place was given up)",
    ),
    code(
        "130",
        &[Elect],
        "SIGINT while campaigning (its place was given up)",
    ),
    code(
        "143",
        &[Run],
        "SIGTERM while waiting for the lock (its queue place was given up)",
    ),
    code(
        "143",
        &[Elect],
        "SIGTERM while campaigning (its place was given up)",
    ),
];

/// The exit-code table shown at the end of `--help`: a command's own rows,
/// or for `distlock --help` every row, prefixed with the commands that give
/// it unless every command does.
pub(crate) fn help(topic: Topic) -> String {
    let lines: Vec<String> = CODES
        .iter()
        .filter(|row| topic == All || row.commands.contains(&topic))
        .map(|row| {
            let meaning = if topic == All && row.commands != COMMANDS {
                let names: Vec<&str> = row.commands.iter().map(|c| c.command()).collect();
                format!("{}: {}", names.join(", "), row.meaning)
            } else {
                row.meaning.to_owned()
            };
            format!("  {:<6} {}", row.code, wrap(&meaning))
        })
        .collect();
    let mut text = format!("Exit codes:\n{}", lines.join("\n"));
    if topic == All {
        text.push_str("\n`distlock COMMAND --help` lists the codes COMMAND can give.");
        text.push_str(&settings_help());
    }
    text
}

/// `text` in lines of at most 72 columns, continued under the meaning's
/// first column.
fn wrap(text: &str) -> String {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > 72 {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join("\n         ")
}

/// The settings a config file or the environment can give, from the one
/// table of them.
fn settings_help() -> String {
    let mut text = format!(
        "\n\nSettings (config file key, environment variable):\n  {:<18} {:<27} backend URL",
        "url",
        distlock::URL_ENV
    );
    for spec in distlock::SETTINGS {
        text.push_str(&format!(
            "\n  {:<18} {:<27} {}",
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
