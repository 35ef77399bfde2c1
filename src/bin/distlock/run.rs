//! `distlock run NAME -- CMD`: hold a lock while a command runs.

use std::time::Duration;

use distlock::{AcquireOptions, Config, ErrorKind, LockBackend, LockName, Wait};
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::child;
use crate::cli::RunArgs;
use crate::exit::{Failure, LOST, NOT_ACQUIRED, USAGE};

/// Bound on the final release, so a dead backend cannot hold up the exit.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) async fn run(args: RunArgs, config: Config) -> Result<u8, Failure> {
    let name = LockName::new(args.name.as_str())?;
    if args.command.is_empty() {
        return Err(Failure::usage(format!(
            "no command to run; usage: distlock run [--ttl D] [--wait D] {name} -- COMMAND [ARGS...]"
        )));
    }
    if let Some(ttl) = args.ttl {
        distlock::check_ttl(ttl)
            .map_err(|e| Failure::new(USAGE, format!("--ttl: {}", e.message())))?;
    }
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_failure)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_failure)?;

    // Also the backend's default: session-based backends (ZooKeeper) take
    // the TTL from their connection, not from each acquisition.
    let mut config = config;
    if args.ttl.is_some() {
        config.ttl = args.ttl;
    }
    let backend = distlock::connect_with(&config).await?;
    let options = AcquireOptions {
        ttl: args.ttl,
        wait: match args.wait {
            None => Wait::Forever,
            Some(d) if d.is_zero() => Wait::No,
            Some(d) => Wait::Timeout(d),
        },
    };
    let acquired = tokio::select! {
        acquired = backend.acquire(&name, &options) => acquired,
        _ = sigint.recv() => return Ok(130),
        _ = sigterm.recv() => return Ok(143),
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
            return Err(Failure::new(
                NOT_ACQUIRED,
                format!(
                    "lock {name} not acquired {waited} on {}: it is held by someone else",
                    backend.description()
                ),
            ));
        }
        Err(e) => return Err(e.into()),
    };
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
    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        let kill_at = lost_at.map(|at| at + args.grace);
        tokio::select! {
            status = running.wait() => break status,
            reason = lost.lost(), if lost_at.is_none() => {
                eprintln!(
                    "distlock: lost lock {name} (token {}) while the command ran: {reason}; \
                     sending SIGTERM to the command",
                    guard.token()
                );
                child::signal(&running, Signal::SIGTERM);
                lost_at = Some(Instant::now());
            }
            _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() && !killed => {
                eprintln!(
                    "distlock: the command did not exit within {} of SIGTERM; sending SIGKILL",
                    distlock::format_duration(args.grace)
                );
                child::signal(&running, Signal::SIGKILL);
                killed = true;
            }
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
    if lost_at.is_some() || !guard.is_held() {
        if lost_at.is_none() {
            eprintln!(
                "distlock: lock {name} (token {}) was lost by the time the command exited: {}",
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
            eprintln!("distlock: lock {name} was lost before it could be released: {e}");
            Ok(LOST)
        }
        Ok(Err(e)) => {
            eprintln!(
                "distlock: warning: releasing lock {name} failed ({e}); its lease will expire"
            );
            Ok(code)
        }
        Err(_) => {
            eprintln!(
                "distlock: warning: releasing lock {name} took longer than {RELEASE_TIMEOUT:?}; its lease will expire"
            );
            Ok(code)
        }
    }
}

fn signal_failure(e: std::io::Error) -> Failure {
    Failure::new(
        crate::exit::UNAVAILABLE,
        format!("cannot install signal handlers: {e}"),
    )
}
