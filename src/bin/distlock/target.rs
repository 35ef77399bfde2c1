//! Which backend to use: `--url`, then `DISTLOCK_URL`, then `--config FILE`,
//! then the embedded default (lock files in the per-user state directory).

use distlock::Config;

use crate::cli::Cli;
use crate::exit::Failure;

/// The config for each URL to use, in order. Settings come from the config
/// file, overridden by `DISTLOCK_*`, overridden by flags.
pub(crate) fn configs(cli: &Cli) -> Result<Vec<Config>, Failure> {
    let file = match &cli.config {
        Some(path) => Config::from_toml_file(path)?,
        None => Config::default(),
    };
    let mut base = file.overlay(Config::from_env()?);
    if let Some(timeout) = cli.connect_timeout {
        base.connect_timeout = Some(timeout);
    }
    if cli.url.is_empty() {
        return Ok(vec![base]);
    }
    Ok(cli
        .url
        .iter()
        .map(|url| Config {
            url: Some(url.clone()),
            ..base.clone()
        })
        .collect())
}

/// The one config for commands that use a single backend.
pub(crate) fn single(cli: &Cli) -> Result<Config, Failure> {
    let mut configs = configs(cli)?;
    if configs.len() > 1 {
        return Err(Failure::usage(
            "--url was given more than once; only `distlock bench` takes several URLs",
        ));
    }
    Ok(configs.remove(0))
}
