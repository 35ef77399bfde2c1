//! `distlock run NAME -- CMD`: hold a lock while a command runs.

use std::ffi::OsStr;
use std::io::IsTerminal as _;
use std::time::Duration;

use distlock::{
    Access, AcquireOptions, Backend, Config, ErrorKind, FencingToken, LockBackend, LockGuard,
    LockHealth, LockName, Wait,
};
use nix::sys::signal::Signal;
use tokio::signal::unix::{Signal as UnixSignal, SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::child;
use crate::cli::{RunArgs, TargetArgs};
use crate::exit::{Failure, INTERRUPTED, LOST, NOT_ACQUIRED, TERMINATED, UNAVAILABLE, USAGE};
use crate::{target, waiting};

/// Bound on the final release, so a dead backend cannot hold up the exit.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on giving up a queue place after a signal, when the configuration
/// sets no request timeout.
const GIVE_UP_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on asking the server, after a wait timed out, whether it answers.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) async fn run(args: RunArgs, target: &TargetArgs) -> Result<u8, Failure> {
    // Arguments first: a usage error whatever the backend, before connecting.
    let name = LockName::new(args.name.as_str())?;
    if !args.stray.is_empty() {
        let words: Vec<String> = args
            .stray
            .iter()
            .chain(&args.command)
            .map(shell_word)
            .collect();
        return Err(Failure::usage(format!(
            "put `--` before the command: distlock run {} -- {}",
            shell_word(&args.name),
            words.join(" ")
        )));
    }
    if args.command.is_empty() {
        return Err(Failure::usage(format!(
            "no command to run; usage: distlock run [--ttl D] [--wait D] {name} -- COMMAND [ARGS...]"
        )));
    }
    if let Some(ttl) = args.ttl {
        check_ttl_arg(ttl)?;
        check_grace(args.grace, ttl)?;
    }
    let access = access_of(&args)?;
    // What is held, for messages: `lock NAME`, `a permit of semaphore NAME (limit N)`, ...
    let what = match access {
        Some(access) => access.describe(&name),
        None => format!("lock {name}"),
    };
    let mut config = target::shared(target, "run")?;
    let (mut sigint, mut sigterm) = stop_signals()?;
    let backend = connect_with_ttl(&mut config, args.ttl).await?;
    let options = AcquireOptions {
        ttl: args.ttl,
        wait: match args.wait {
            None => Wait::Forever,
            Some(d) if d.is_zero() => Wait::No,
            Some(d) => Wait::Timeout(d),
        },
        holder: Some(holder_label(&config, &args.command).into()),
    };
    let notice = waiting::notice(
        std::io::stderr().is_terminal(),
        &what,
        backend.description(),
        args.wait,
    );
    let acquire = async {
        match access {
            Some(access) => backend.acquire_as(&name, access, &options).await,
            None => backend.acquire(&name, &options).await,
        }
    };
    let acquired = tokio::select! {
        acquired = waiting::noting(acquire, notice) => acquired,
        _ = sigint.recv() => return Ok(give_up(INTERRUPTED, &config).await),
        _ = sigterm.recv() => return Ok(give_up(TERMINATED, &config).await),
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(e)
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Timeout)
                && args.wait.is_some() =>
        {
            let waited = match args.wait {
                Some(d) if !d.is_zero() => format!("within {}", distlock::format_duration(d)),
                _ => "(--wait 0: not waiting)".to_owned(),
            };
            // A timeout can also be the server's silence: tell "could not
            // reach it" from "held by someone else" by asking it once.
            if e.kind() == ErrorKind::Timeout
                && let Some(unreachable) = unreachable(&backend, &name).await
            {
                give_up(UNAVAILABLE, &config).await;
                return Err(Failure::new(
                    UNAVAILABLE,
                    format!(
                        "{what} not acquired {waited}: could not reach {} ({unreachable}); \
                         the wait ended with: {e}",
                        backend.description()
                    ),
                ));
            }
            // Every backend leaves the queue before a timeout returns; any
            // clean-up still in the background ends before the process does.
            give_up(NOT_ACQUIRED, &config).await;
            return Err(Failure::new(
                NOT_ACQUIRED,
                format!(
                    "{what} not acquired {waited} on {}: it is held by someone else",
                    backend.description()
                ),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let grace = match args.grace {
        Some(grace) => grace,
        None => guard.ttl() / 4,
    };
    if let Err(failure) = check_grace(Some(grace), guard.ttl()) {
        let _ = tokio::time::timeout(RELEASE_TIMEOUT, guard.release()).await;
        return Err(failure);
    }
    tracing::info!(lock = %name, token = %guard.token(), "acquired; running the command");

    let env = [
        ("DISTLOCK_NAME", name.to_string()),
        ("DISTLOCK_TOKEN", guard.token().to_string()),
        ("DISTLOCK_KEY", guard.key().to_owned()),
        ("DISTLOCK_URL", backend.description().to_owned()),
    ];
    let mut running = match child::spawn(&args.command, &env) {
        Ok(child) => child,
        Err(failure) => {
            let _ = tokio::time::timeout(RELEASE_TIMEOUT, guard.release()).await;
            return Err(failure);
        }
    };

    let lost = guard.lost_signal();
    let mut ending = Ending::new(&guard, grace);
    let mut health = guard.health();
    let status = loop {
        let wake_at = ending.next_check(&guard);
        // Biased: a revoked lock ends its validity and fires its lost
        // signal together, and the loss is what the user must read.
        tokio::select! {
            biased;
            status = running.wait() => break status,
            reason = lost.lost(), if !ending.terminated => {
                eprintln!(
                    "distlock: lost {what} (token {}) while the command ran: {reason}; \
                     sending SIGTERM to the command",
                    guard.token()
                );
                ending.terminate(&running);
            }
            changed = guard.health_changed(&health), if !ending.terminated => {
                report_health(&what, guard.token(), &health, &changed);
                health = changed;
            }
            _ = sleep_until(wake_at) => ending.on_time(&guard, &running, &what),
            _ = sigint.recv() => child::signal(&running, Signal::SIGINT),
            _ = sigterm.recv() => child::signal(&running, Signal::SIGTERM),
        }
    };
    let status = status.map_err(|e| {
        Failure::new(
            crate::exit::UNAVAILABLE,
            format!("waiting for the command failed: {e}"),
        )
    })?;
    if ending.terminated || !guard.is_held() {
        if !ending.terminated {
            eprintln!(
                "distlock: {what} (token {}) was lost by the time the command exited: {}",
                guard.token(),
                lost.reason()
                    .map_or_else(|| "validity deadline passed".to_owned(), |r| r.to_string())
            );
        }
        drop(guard);
        return Ok(LOST);
    }
    let code = child::exit_code(status);
    match tokio::time::timeout(RELEASE_TIMEOUT, guard.release()).await {
        Ok(Ok(())) => Ok(code),
        Ok(Err(e)) if matches!(e.kind(), ErrorKind::LeaseLost | ErrorKind::NotHeld) => {
            eprintln!("distlock: {what} was lost before it could be released: {e}");
            Ok(LOST)
        }
        Ok(Err(e)) => {
            eprintln!("distlock: warning: releasing {what} failed ({e}); its lease will expire");
            Ok(code)
        }
        Err(_) => {
            eprintln!(
                "distlock: warning: releasing {what} took longer than {}; its lease will expire",
                distlock::human_duration(RELEASE_TIMEOUT)
            );
            Ok(code)
        }
    }
}

/// One line on stderr when renewal starts failing (the lock is still held,
/// with the validity it has left) and one when it works again; a loss is
/// reported where the command is stopped.
fn report_health(what: &str, token: FencingToken, before: &LockHealth, now: &LockHealth) {
    match (before, now) {
        (_, LockHealth::RenewalFailing { remaining, error }) => {
            let left =
                remaining.map_or_else(|| "an unknown part".to_owned(), distlock::human_duration);
            eprintln!(
                "distlock: warning: renewing {what} (token {token}) is failing, {left} of its \
                 lease left: {error}"
            );
        }
        (LockHealth::RenewalFailing { .. }, LockHealth::Held) => {
            eprintln!("distlock: renewing {what} (token {token}) works again");
        }
        _ => {}
    }
}

/// What `--permits N`, `--shared` or `--exclusive` ask to hold instead of
/// the lock NAME (`None` without them); clap refuses them together.
fn access_of(args: &RunArgs) -> Result<Option<Access>, Failure> {
    if let Some(limit) = args.permits {
        return Access::permit(limit)
            .map(Some)
            .map_err(|e| Failure::usage(format!("--permits {limit}: {e}")));
    }
    Ok(if args.shared {
        Some(Access::Read)
    } else if args.exclusive {
        Some(Access::Write)
    } else {
        None
    })
}

/// Ends the command before the lock can pass to someone else.
///
/// The lease is certainly ours until its validity deadline, and the server
/// can hand the lock over about one drift allowance after it. So the
/// command gets SIGTERM once less than `grace` of validity is left (or at
/// once when the lock is lost), and SIGKILL one drift allowance before the
/// deadline: it is gone by the time anyone else can hold the lock. Only a
/// runner paused past its deadline can overlap, and fencing covers that.
struct Ending {
    grace: Duration,
    drift: Duration,
    /// The last known validity deadline.
    deadline: Option<Instant>,
    terminated: bool,
    kill_at: Option<Instant>,
    killed: bool,
}

impl Ending {
    fn new(guard: &LockGuard, grace: Duration) -> Self {
        let mut ending = Ending {
            grace,
            drift: distlock_core::raw::drift_allowance(guard.ttl()),
            deadline: None,
            terminated: false,
            kill_at: None,
            killed: false,
        };
        ending.observe(guard);
        ending
    }

    fn observe(&mut self, guard: &LockGuard) {
        if guard.is_held()
            && let Some(left) = guard.remaining_validity()
        {
            self.deadline = Some(Instant::now() + left);
        }
    }

    /// SIGKILL time: a drift allowance before the deadline.
    fn kill_deadline(&self) -> Option<Instant> {
        self.deadline
            .map(|d| d.checked_sub(self.drift).unwrap_or(d))
    }

    /// When to look again: the SIGTERM point, or the SIGKILL point.
    fn next_check(&mut self, guard: &LockGuard) -> Instant {
        self.observe(guard);
        let far = Instant::now() + Duration::from_secs(3600);
        if self.killed {
            return far;
        }
        if self.terminated {
            return self.kill_at.unwrap_or(far);
        }
        match self.deadline {
            Some(deadline) => deadline.checked_sub(self.grace).unwrap_or(deadline),
            None => far,
        }
    }

    fn terminate(&mut self, running: &tokio::process::Child) {
        child::signal(running, Signal::SIGTERM);
        self.terminated = true;
        let after_grace = Instant::now() + self.grace;
        self.kill_at = Some(match self.kill_deadline() {
            Some(kill) => kill.min(after_grace),
            None => after_grace,
        });
    }

    /// `what` names what is held, for messages (`lock NAME`, ...).
    fn on_time(&mut self, guard: &LockGuard, running: &tokio::process::Child, what: &str) {
        self.observe(guard);
        let now = Instant::now();
        if !self.terminated {
            let left = self
                .deadline
                .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
            if left <= self.grace {
                eprintln!(
                    "distlock: {what} (token {}) could not be renewed and has {} of its lease \
                     left; sending SIGTERM to the command",
                    guard.token(),
                    distlock::human_duration(left)
                );
                self.terminate(running);
            }
        } else if !self.killed && self.kill_at.is_some_and(|k| now >= k) {
            eprintln!(
                "distlock: the command did not exit before {what} could pass to another \
                 holder; sending SIGKILL"
            );
            child::signal(running, Signal::SIGKILL);
            self.killed = true;
        }
    }
}

/// `--grace` must leave the lease room to be renewed: renewal keeps more
/// than half of the TTL in hand, so a grace of at most half the TTL never
/// ends a command whose lock is healthy.
fn check_grace(grace: Option<Duration>, ttl: Duration) -> Result<(), Failure> {
    match grace {
        Some(grace) if grace > ttl / 2 => Err(Failure::usage(format!(
            "--grace {} must be at most half the TTL ({}): the command gets SIGTERM once less \
             than --grace of the lease is left",
            distlock::format_duration(grace),
            distlock::format_duration(ttl)
        ))),
        _ => Ok(()),
    }
}

/// After SIGINT or SIGTERM while waiting: the dropped acquisition gives up
/// its queue place in the background; wait for that, so the next waiter is
/// not held up for a whole TTL, then exit with `code`.
pub(crate) async fn give_up(code: u8, config: &Config) -> u8 {
    let within = config.settings().request_timeout.unwrap_or(GIVE_UP_TIMEOUT);
    if !distlock::wait_for_background(within).await {
        eprintln!(
            "distlock: giving up the queue place took longer than {}; it expires with its lease",
            distlock::human_duration(within)
        );
    }
    code
}

/// `--ttl` checked as every backend checks a TTL, failing as a usage error.
pub(crate) fn check_ttl_arg(ttl: Duration) -> Result<(), Failure> {
    distlock::check_ttl(ttl).map_err(|e| Failure::new(USAGE, format!("--ttl: {}", e.message())))
}

/// SIGINT and SIGTERM listeners, set up before connecting, so that either
/// signal while waiting gives up cleanly instead of killing the process.
pub(crate) fn stop_signals() -> Result<(UnixSignal, UnixSignal), Failure> {
    let listen = |kind| {
        signal(kind).map_err(|e| {
            Failure::new(
                crate::exit::UNAVAILABLE,
                format!("cannot install signal handlers: {e}"),
            )
        })
    };
    Ok((
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
    ))
}

/// Connects with `ttl` (if given) as the backend's default too:
/// session-based backends (ZooKeeper) take the TTL from their connection,
/// not from each acquisition.
pub(crate) async fn connect_with_ttl(
    config: &mut Config,
    ttl: Option<Duration>,
) -> Result<Backend, Failure> {
    if ttl.is_some() {
        config.overrides.ttl = ttl;
    }
    Ok(distlock::connect_with(config).await?)
}

/// Longest command shown in a holder label; longer ones end in `...`.
const LABEL_COMMAND_MAX: usize = 120;

/// Why `backend` does not answer a read of `name`'s status, if it does not:
/// a server that answers (or cannot be asked) is taken to be reachable.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn unreachable(backend: &Backend, name: &LockName) -> Option<String> {
    match tokio::time::timeout(PROBE_TIMEOUT, backend.inspect(name)).await {
        Err(_) => Some(format!(
            "no answer within {}",
            distlock::human_duration(PROBE_TIMEOUT)
        )),
        Ok(Err(e)) if e.kind() != ErrorKind::Unsupported => Some(e.to_string()),
        Ok(_) => None,
    }
}

/// The holder description operators see in `distlock status`: the
/// configured `holder` (config file or DISTLOCK_HOLDER), else
/// `distlock run COMMAND@host:pid`.
fn holder_label(config: &Config, command: &[std::ffi::OsString]) -> String {
    if let Some(label) = &config.settings().holder {
        return label.clone();
    }
    let mut shown = command.iter().map(shell_word).collect::<Vec<_>>().join(" ");
    if shown.len() > LABEL_COMMAND_MAX {
        let mut cut = LABEL_COMMAND_MAX;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("...");
    }
    format!(
        "distlock run {shown}@{}",
        distlock::default_holder_description()
    )
}

/// `word` as a shell would need it typed: quoted when it holds anything
/// but plain characters.
fn shell_word(word: impl AsRef<OsStr>) -> String {
    let text = word.as_ref().to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::{holder_label, shell_word};
    use distlock::Config;

    #[test]
    fn the_holder_label_names_the_command_and_process_unless_configured() {
        let command = ["sh".into(), "-c".into(), "echo hi".into()];
        let label = holder_label(&Config::default(), &command);
        assert!(
            label.starts_with("distlock run sh -c 'echo hi'@"),
            "{label}"
        );
        assert!(
            label.ends_with(&format!(":{}", std::process::id())),
            "{label}"
        );
        let configured = Config {
            settings: distlock::Settings {
                holder: Some("billing-worker-3".into()),
                ..distlock::Settings::default()
            },
            ..Config::default()
        };
        assert_eq!(holder_label(&configured, &command), "billing-worker-3");
        let long = ["é".repeat(100).into()];
        assert!(holder_label(&Config::default(), &long).contains("...@"));
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("ls"), "ls");
        assert_eq!(shell_word("-l"), "-l");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
