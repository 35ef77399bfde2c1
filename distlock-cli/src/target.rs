//! Which backend to use: `--url`, then `DISTLOCK_URL`, then `--config FILE`,
//! then the embedded default (lock files in the machine-wide `/var/tmp/distlock`).

use distlock::{Backend, Config, Scheme};

use crate::cli::TargetArgs;
use crate::exit::Failure;

/// The config for each URL to use, in order. What the user wrote most
/// specifically wins: flags, then the URL's own options, then `DISTLOCK_*`,
/// then the config file.
pub(crate) fn configs(target: &TargetArgs) -> Result<Vec<Config>, Failure> {
    let file = match &target.config {
        Some(path) => Config::from_toml_file(path)?,
        None => Config::default(),
    };
    let mut base = file.overlay(from_env()?);
    if let Some(timeout) = target.connect_timeout {
        base.overrides.connect_timeout = Some(timeout);
    }
    if target.url.is_empty() {
        return Ok(vec![base]);
    }
    Ok(target
        .url
        .iter()
        .map(|url| Config {
            url: Some(url.clone()),
            ..base.clone()
        })
        .collect())
}

/// The one config of `distlock COMMAND`, which coordinates processes: one
/// URL, and not `memory://` (whose locks live inside one process).
pub(crate) fn shared(target: &TargetArgs, command: &str) -> Result<Config, Failure> {
    let mut configs = configs(target)?;
    if configs.len() > 1 {
        return Err(Failure::usage(
            "--url was given more than once; only `distlock bench` takes several URLs",
        ));
    }
    let config = configs.remove(0);
    let url = config.effective_url();
    if Scheme::of_url(&url)? == Scheme::Memory {
        return Err(Failure::usage(format!(
            "{url} keeps its locks inside one process, so `distlock {command}` would \
             coordinate with no other process; use file:///DIR (the default, for the \
             processes of one machine) or a server backend"
        )));
    }
    Ok(config)
}

/// [`Config::from_env`]; its errors name the variable at fault.
fn from_env() -> Result<Config, Failure> {
    Ok(Config::from_env()?)
}

/// Connects to the one backend of `distlock COMMAND` (see [`shared`]).
pub(crate) async fn connect_shared(target: &TargetArgs, command: &str) -> Result<Backend, Failure> {
    let config = shared(target, command)?;
    Ok(distlock::connect_with(&config).await?)
}
