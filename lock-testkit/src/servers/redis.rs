//! Redis servers: one, one with a password, or N independent ones (Redlock).
//!
//! Servers persist nothing (`--save '' --appendonly no`), so a restart comes
//! back on the same port with an empty dataset: that is how tests simulate
//! a Redis that lost its data.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use tempfile::TempDir;

use super::binary::Requirement;
use super::member::member_list;
use super::ports::free_port;
use super::process::{ChildProcess, process_controls};
use super::readiness::wait_ready;
use super::workdir::temp_dir;
use super::{LaunchError, RespReply, resp};

/// How long a server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// The Redis server, which the cluster launcher runs too.
pub(super) const REDIS: Requirement = Requirement {
    name: "redis-server",
    package: "redis-server",
};

/// How to launch a [`RedisServer`].
#[derive(Clone, Default)]
pub struct RedisOptions {
    password: Option<String>,
    binary: Option<PathBuf>,
}

impl RedisOptions {
    /// No password, `redis-server` from `PATH`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires clients to authenticate with `password` (`--requirepass`).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Runs this `redis-server` binary instead of the one on `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("binary", &self.binary)
            .finish()
    }
}

/// One running `redis-server`; dropping it kills the process.
pub struct RedisServer {
    port: u16,
    password: Option<String>,
    // Declared before `dir`: the process dies before its directory goes.
    process: ChildProcess,
    dir: TempDir,
}

process_controls!(RedisServer);

impl RedisServer {
    /// Starts a server without a password and waits until it answers `PING`.
    pub async fn start() -> Result<Self, LaunchError> {
        Self::start_with(RedisOptions::new()).await
    }

    /// Starts a server that requires `password` and waits until it answers
    /// `PING` (with `NOAUTH`, which proves it is up).
    pub async fn start_with_password(password: &str) -> Result<Self, LaunchError> {
        Self::start_with(RedisOptions::new().password(password)).await
    }

    /// Starts a server as described by `options` and waits until it is ready.
    pub async fn start_with(options: RedisOptions) -> Result<Self, LaunchError> {
        let server = Self::spawn(&options)?;
        server.wait_ready().await?;
        Ok(server)
    }

    fn spawn(options: &RedisOptions) -> Result<Self, LaunchError> {
        let binary = REDIS.resolve(options.binary.as_deref())?;
        let port = free_port();
        let label = format!("redis-server (127.0.0.1:{port})");
        let dir = temp_dir("distlock-redis-", &label)?;
        let port_text = port.to_string();
        let mut args: Vec<OsString> = [
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "local",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        if let Some(password) = &options.password {
            args.extend(["--requirepass".into(), password.into()]);
        }
        args.extend(["--dir".into(), dir.path().as_os_str().to_owned()]);
        let process = ChildProcess::new(label, binary, args, dir.path(), "redis.log");
        process.spawn()?;
        Ok(Self {
            port,
            password: options.password.clone(),
            process,
            dir,
        })
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The URL without credentials, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The URL with the password if one is set
    /// (`redis://:PASSWORD@127.0.0.1:PORT`), otherwise the same as
    /// [`RedisServer::url`].
    pub fn authenticated_url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => self.url(),
        }
    }

    /// The password clients must use, if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The server's temporary directory (its working dir and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (stdout and stderr, across restarts).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// Sends one command on a fresh connection, authenticating first if the
    /// server has a password, and returns the reply. Handy for
    /// `INFO commandstats`, `CONFIG RESETSTAT`, `FLUSHALL`, `DEBUG SLEEP`
    /// (enabled for local connections).
    ///
    /// Server errors come back as [`RespReply::Error`]; `Err` means the
    /// connection failed.
    pub async fn command(&self, args: &[&str]) -> io::Result<RespReply> {
        resp::command(&self.addr(), self.password.as_deref(), args).await
    }

    /// Calls of each command so far (`cmdstat_<name>:calls=N` of
    /// `INFO commandstats`), by lower-case command name. Commands that Lua
    /// scripts ran count too.
    pub async fn command_stats(&self) -> io::Result<BTreeMap<String, u64>> {
        let info = self.command(&["INFO", "commandstats"]).await?;
        match info {
            RespReply::Bulk(Some(text)) => Ok(parse_command_stats(&text)),
            other => Err(io::Error::other(format!(
                "INFO commandstats: unexpected reply {other:?}"
            ))),
        }
    }

    /// Calls of `command` (lower case, as `evalsha`) so far; 0 if it never ran.
    pub async fn command_calls(&self, command: &str) -> io::Result<u64> {
        Ok(self
            .command_stats()
            .await?
            .get(command)
            .copied()
            .unwrap_or(0))
    }

    /// Sends one command without authenticating (to check that a password
    /// is enforced, say).
    pub async fn command_unauthenticated(&self, args: &[&str]) -> io::Result<RespReply> {
        resp::command(&self.addr(), None, args).await
    }

    /// Kills the server if it runs, starts it again on the same port (with
    /// an empty dataset), and waits until it answers `PING`.
    pub async fn restart(&self) -> Result<(), LaunchError> {
        self.process.kill().await;
        self.process.spawn()?;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<(), LaunchError> {
        wait_ready(&self.process, READY_TIMEOUT, || self.ping()).await
    }

    /// `PONG`, or `NOAUTH` from a server with a password, means ready.
    async fn ping(&self) -> Result<(), String> {
        match self.command_unauthenticated(&["PING"]).await {
            Ok(RespReply::Simple(pong)) if pong == "PONG" => Ok(()),
            Ok(RespReply::Error(noauth))
                if noauth.starts_with("NOAUTH") && self.password.is_some() =>
            {
                Ok(())
            }
            Ok(other) => Err(format!("PING answered {other:?}")),
            Err(err) => Err(format!("PING: {err}")),
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("addr", &self.addr())
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("process", &self.process)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// N independent Redis servers (no replication between them), for Redlock.
#[derive(Debug)]
pub struct RedisServers {
    servers: Vec<RedisServer>,
}

impl RedisServers {
    /// Starts `count` servers at once and waits until each answers `PING`.
    pub async fn start(count: usize) -> Result<Self, LaunchError> {
        Self::start_with(count, RedisOptions::new()).await
    }

    /// Starts `count` servers, each as described by `options`.
    pub async fn start_with(count: usize, options: RedisOptions) -> Result<Self, LaunchError> {
        let servers = (0..count)
            .map(|_| RedisServer::spawn(&options))
            .collect::<Result<Vec<_>, _>>()?;
        try_join_all(servers.iter().map(RedisServer::wait_ready)).await?;
        Ok(Self { servers })
    }

    /// The addresses, `127.0.0.1:PORT`, one per server.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::addr).collect()
    }

    /// The URLs, `redis://127.0.0.1:PORT`, one per server.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }
}

member_list!(RedisServers, servers: RedisServer, servers, server);

/// `cmdstat_<name>:calls=N,...` lines of `INFO commandstats`.
fn parse_command_stats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_owned(), calls.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod command_stats_tests {
    use super::parse_command_stats;

    #[test]
    fn calls_are_read_per_command() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=30,usec_per_call=2.50\r\n\
                    cmdstat_get:calls=3,usec=1\r\n";
        let stats = parse_command_stats(info);
        assert_eq!(stats.get("evalsha"), Some(&12));
        assert_eq!(stats.get("get"), Some(&3));
        assert_eq!(stats.len(), 2);
    }
}
