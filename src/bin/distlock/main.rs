//! `distlock`: run commands under a distributed lock, elect leaders and
//! compare backends, from the shell. See `distlock --help`.

mod bench;
mod child;
mod cli;
mod elect;
mod exit;
mod run;
mod target;

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind as ClapErrorKind;

use cli::{Cli, Command};
use exit::Failure;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                ClapErrorKind::DisplayHelp
                    | ClapErrorKind::DisplayVersion
                    | ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            let _ = e.print();
            return if e.kind() == ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
        Err(e) => return Failure::usage(clap_message(&e)).report(),
    };
    init_logging(cli.verbose);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            return Failure::new(exit::UNAVAILABLE, format!("cannot start the runtime: {e}"))
                .report();
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    // Do not wait for lingering background tasks (best-effort releases have
    // had their chance; the lease TTL is the backstop).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Run(ref args) if args.command.is_empty() => {
            // Checked before connecting: a missing command is a usage error
            // whatever the backend.
            distlock::LockName::new(args.name.as_str())?;
            Err(Failure::usage(format!(
                "no command to run; usage: distlock run [--ttl D] [--wait D] {} -- COMMAND [ARGS...]",
                args.name
            )))
        }
        Command::Run(_) | Command::Elect(_) => {
            let config = target::single(&cli)?;
            match cli.command {
                Command::Run(args) => run::run(args, config).await,
                Command::Elect(args) => elect::elect(args, config).await,
                Command::Bench(_) => unreachable!(),
            }
        }
        Command::Bench(ref _args) => {
            let configs = target::configs(&cli)?;
            let Command::Bench(args) = cli.command else {
                unreachable!()
            };
            bench::bench(args, configs).await
        }
    }
}

/// Clap's error as one line, without its usage block.
fn clap_message(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let text: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    let joined = text.join(" ");
    let joined = joined.strip_prefix("error: ").unwrap_or(&joined).to_owned();
    format!("{joined} (see distlock --help)")
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("DISTLOCK_LOG") {
        Ok(filter) if !filter.is_empty() => EnvFilter::new(filter),
        _ => EnvFilter::new(match verbose {
            0 => "off",
            1 => "info",
            _ => "debug",
        }),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
