//! `distlock`: run commands under a distributed lock, elect leaders,
//! operate locks (status, ls, break) and compare backends, from the shell.
//! See `distlock --help`.

mod child;
mod cli;
mod commands;
mod defaults;
mod exit;
mod target;
mod timestamp;
mod waiting;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind as ClapErrorKind;

use cli::{Cli, Command};
use commands::{bench, breaking, elect, ls, run, status};
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
        Command::Run(args) => run::run(args, &cli.target).await,
        Command::Elect(args) => elect::elect(args, &cli.target).await,
        Command::Bench(args) => bench::bench(args, &cli.target).await,
        Command::Status(args) => status::status(args, &cli.target).await,
        Command::Ls(args) => ls::ls(args, &cli.target).await,
        Command::Break(args) => breaking::break_lock(args, &cli.target).await,
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
        // Colour codes are noise in a file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
