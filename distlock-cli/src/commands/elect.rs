//! `distlock elect NAME [VALUE]` and `distlock elect --listen NAME`.

use std::io::{IsTerminal as _, Write as _};

use distlock::{AcquireOptions, Candidacy, ElectionBackend, LockName};
use futures::StreamExt;

use crate::cli::{ElectArgs, TargetArgs};
use crate::commands::run::{check_ttl_arg, connect_with_ttl, give_up, stop_signals};
use crate::exit::{Failure, INTERRUPTED, LOST, TERMINATED, UNAVAILABLE};
use crate::{target, waiting};

pub(crate) async fn elect(args: ElectArgs, target: &TargetArgs) -> Result<u8, Failure> {
    let name = LockName::new(args.name.as_str())?;
    if let Some(ttl) = args.ttl {
        check_ttl_arg(ttl)?;
    }
    if args.listen && args.value.is_some() {
        return Err(Failure::usage(
            "--listen only follows the leaders; it takes no VALUE",
        ));
    }
    let mut config = target::shared(target, "elect")?;
    let (mut sigint, mut sigterm) = stop_signals()?;
    let backend = connect_with_ttl(&mut config, args.ttl).await?;
    if backend.election_backend().is_none() {
        return Err(Failure::usage(format!(
            "the backend at {} has no leader election",
            backend.description()
        )));
    }
    if args.listen {
        let mut leaders = backend.observe(&name).await?;
        loop {
            tokio::select! {
                next = leaders.next() => match next {
                    Some(Ok(leader)) => print_line(&leader.value_lossy()),
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(Failure::new(
                        UNAVAILABLE,
                        format!("the backend at {} stopped reporting leaders of {name}", backend.description()),
                    )),
                },
                _ = sigint.recv() => return Ok(0),
                _ = sigterm.recv() => return Ok(0),
            }
        }
    }
    let value = args.value.unwrap_or_else(default_value);
    let mut options = AcquireOptions::new();
    options.ttl = args.ttl;
    let notice = waiting::notice(
        std::io::stderr().is_terminal(),
        &format!("the leadership of {name}"),
        backend.description(),
        None,
    );
    let leadership = tokio::select! {
        won = waiting::noting(backend.campaign(&name, Candidacy::new(value.clone()).with_options(options)), notice) => won?,
        _ = sigint.recv() => return Ok(give_up(INTERRUPTED, &config).await),
        _ = sigterm.recv() => return Ok(give_up(TERMINATED, &config).await),
    };
    print_line(&format!(
        "elected name={name} token={} value={value} key={}",
        leadership.token(),
        leadership.key()
    ));
    tokio::select! {
        reason = leadership.lost() => {
            eprintln!("distlock: lost the leadership of {name} (token {}): {reason}", leadership.token());
            Ok(LOST)
        }
        _ = sigint.recv() => resign(leadership).await,
        _ = sigterm.recv() => resign(leadership).await,
    }
}

async fn resign(leadership: distlock::Leadership) -> Result<u8, Failure> {
    match tokio::time::timeout(std::time::Duration::from_secs(10), leadership.resign()).await {
        Ok(Ok(())) => Ok(0),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(Failure::new(
            UNAVAILABLE,
            "resigning took longer than 10 s; the leadership will expire with its lease",
        )),
    }
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}
