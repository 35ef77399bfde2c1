//! A PostgreSQL server: a fresh cluster (`initdb`) in a temporary directory.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root the
//! data directory is handed to the `postgres` user (which Debian's package
//! creates) and both `initdb` and the server run as that user. The server
//! is started through `setpriv`, which `exec`s it, so the child we
//! supervise is the postmaster itself and signals reach it.
//!
//! The postmaster forks one backend process per connection. Killing or
//! pausing "the server" therefore signals the postmaster and every process
//! it forked, as a crash or a frozen machine would: a paused postmaster
//! alone would still let its backends answer connections it already has.
//!
//! A server without a password starts from a copy of a template cluster
//! that `initdb` makes once per machine (`distlock-postgres-template-*` in
//! the temp dir; delete it to make it again), which saves about a second
//! per server.
//!
//! With [`PostgresOptions::password`], TCP clients must authenticate with
//! `scram-sha-256` (so a test can check a wrong password); otherwise any
//! loopback client is trusted.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::LaunchError;
use super::binary::Requirement;
use super::ports::free_port;
use super::process::{ChildProcess, run_tool, tool_output};
use super::readiness::wait_ready;
use super::workdir::temp_dir;

/// How long a server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Where Debian installs each PostgreSQL version's programs.
const VERSIONS_DIR: &str = "/usr/lib/postgresql";
/// The superuser `initdb` creates, and the OS user the server runs as.
const SUPERUSER: &str = "postgres";
/// The server program, found next to `initdb`.
const POSTGRES: Requirement = Requirement {
    name: "postgres",
    package: "postgresql",
};
/// The cluster initialiser; its presence is what "installed" means.
const INITDB: Requirement = Requirement {
    name: "initdb",
    package: "postgresql",
};

/// How to launch a [`PostgresServer`].
#[derive(Clone, Default)]
pub struct PostgresOptions {
    password: Option<String>,
    bin_dir: Option<PathBuf>,
    fsync: bool,
    tls: Option<(PathBuf, PathBuf)>,
    client_ca: Option<PathBuf>,
}

impl PostgresOptions {
    /// Trusted loopback clients, no fsync, the newest installed version.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires TCP clients to log in as `postgres` with `password`
    /// (`scram-sha-256`).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Runs the programs of this directory (holding `initdb` and `postgres`)
    /// instead of the newest under `/usr/lib/postgresql/*/bin`.
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Serves TLS (`ssl=on`) with this PEM certificate and key, besides
    /// plain connections; see [`certs`](super::certs) for test certificates.
    pub fn tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls = Some((cert.into(), key.into()));
        self
    }

    /// With [`tls`](Self::tls): a TLS client must present a certificate
    /// signed by this CA (`hostssl … clientcert=verify-ca`), or is refused.
    /// Plain-text clients are still trusted, so that [`PostgresServer::query`]
    /// (`psql`, which falls back to plain text) keeps working.
    pub fn client_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.client_ca = Some(ca.into());
        self
    }

    /// Makes commits durable (`fsync=on`). Off by default: tests are faster
    /// without, and a killed server still keeps what it committed, since
    /// only an OS crash loses unsynced writes.
    pub fn fsync(mut self, on: bool) -> Self {
        self.fsync = on;
        self
    }
}

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("bin_dir", &self.bin_dir)
            .field("fsync", &self.fsync)
            .field("tls", &self.tls)
            .field("client_ca", &self.client_ca)
            .finish()
    }
}

/// One running PostgreSQL server; dropping it kills its processes and
/// removes its data directory.
pub struct PostgresServer {
    port: u16,
    password: Option<String>,
    bin_dir: PathBuf,
    // Declared before `dir`: the process dies before its directory goes.
    process: ChildProcess,
    dir: TempDir,
}

impl PostgresServer {
    /// Starts a server that trusts loopback clients and waits until it
    /// accepts connections.
    pub async fn start() -> Result<Self, LaunchError> {
        Self::start_with(PostgresOptions::new()).await
    }

    /// Starts a server whose `postgres` user logs in with `password`.
    pub async fn start_with_password(password: &str) -> Result<Self, LaunchError> {
        Self::start_with(PostgresOptions::new().password(password)).await
    }

    /// Starts a server as described by `options` and waits until it is ready.
    pub async fn start_with(options: PostgresOptions) -> Result<Self, LaunchError> {
        let server = Self::spawn(&options)?;
        server.wait_ready().await?;
        Ok(server)
    }

    fn spawn(options: &PostgresOptions) -> Result<Self, LaunchError> {
        let bin_dir = match &options.bin_dir {
            Some(dir) => dir.clone(),
            None => newest_bin_dir()?,
        };
        let initdb = INITDB.executable_at(&bin_dir.join(INITDB.name))?;
        let postgres = POSTGRES.executable_at(&bin_dir.join(POSTGRES.name))?;
        let port = free_port();
        let label = format!("postgres (127.0.0.1:{port})");
        let dir = temp_dir("distlock-postgres-", &label)?;
        let io_error = |source| LaunchError::Io {
            what: label.clone(),
            source,
        };
        let as_root = running_as_root();
        if as_root {
            give_to_postgres(dir.path()).map_err(io_error)?;
        }
        let data = dir.path().join("data");
        match options.password.as_deref() {
            // Copying a cluster made once is ~20 times faster than initdb.
            None => copy_cluster(&template(&initdb, as_root)?, &data, &label)?,
            Some(password) => {
                init_cluster(&initdb, &data, dir.path(), Some(password), as_root, &label)?;
            }
        }
        let mut args: Vec<OsString> = Vec::new();
        let program = if as_root {
            args.extend(
                [
                    "--reuid",
                    SUPERUSER,
                    "--regid",
                    SUPERUSER,
                    "--init-groups",
                    "--",
                ]
                .map(OsString::from),
            );
            args.push(postgres.into_os_string());
            PathBuf::from("setpriv")
        } else {
            postgres
        };
        let fsync = if options.fsync { "on" } else { "off" };
        args.extend([
            "-D".into(),
            data.into_os_string(),
            "-p".into(),
            port.to_string().into(),
            "-k".into(),
            dir.path().as_os_str().to_owned(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-c".into(),
            format!("fsync={fsync}").into(),
            "-c".into(),
            "max_connections=200".into(),
        ]);
        if let Some((cert, key)) = &options.tls {
            // The server insists on a key only its own user can read.
            let (cert_copy, key_copy) =
                (dir.path().join("server.crt"), dir.path().join("server.key"));
            let io_error = |source| LaunchError::Io {
                what: label.clone(),
                source,
            };
            fs::copy(cert, &cert_copy).map_err(io_error)?;
            fs::copy(key, &key_copy).map_err(io_error)?;
            fs::set_permissions(
                &key_copy,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .map_err(io_error)?;
            if as_root {
                give_to_postgres(&cert_copy).map_err(io_error)?;
                give_to_postgres(&key_copy).map_err(io_error)?;
            }
            args.extend([
                "-c".into(),
                "ssl=on".into(),
                "-c".into(),
                format!("ssl_cert_file={}", cert_copy.display()).into(),
                "-c".into(),
                format!("ssl_key_file={}", key_copy.display()).into(),
            ]);
            if let Some(ca) = &options.client_ca {
                let (ca_copy, hba) = (
                    dir.path().join("client-ca.crt"),
                    dir.path().join("hba.conf"),
                );
                fs::copy(ca, &ca_copy).map_err(io_error)?;
                fs::write(
                    &hba,
                    "local all all trust\n\
                     hostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n\
                     hostnossl all all 127.0.0.1/32 trust\n",
                )
                .map_err(io_error)?;
                if as_root {
                    give_to_postgres(&ca_copy).map_err(io_error)?;
                    give_to_postgres(&hba).map_err(io_error)?;
                }
                args.extend([
                    "-c".into(),
                    format!("ssl_ca_file={}", ca_copy.display()).into(),
                    "-c".into(),
                    format!("hba_file={}", hba.display()).into(),
                ]);
            }
        }
        let process = ChildProcess::new(label, program, args, dir.path(), "postgres.log");
        process.spawn()?;
        Ok(Self {
            port,
            password: options.password.clone(),
            bin_dir,
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

    /// The URL of database `postgres` as user `postgres`, without the
    /// password: `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL with the password if one is set, otherwise [`url`](Self::url).
    pub fn authenticated_url(&self) -> String {
        match &self.password {
            Some(password) => format!(
                "postgres://{SUPERUSER}:{password}@127.0.0.1:{}/postgres",
                self.port
            ),
            None => self.url(),
        }
    }

    /// The password of user `postgres`, if the server requires one.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The directory of `psql`, `pg_isready` and the server programs.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// A `psql` command for database `postgres` on this server, with the
    /// password in its environment, ready for `-c SQL` arguments.
    pub fn psql(&self) -> Command {
        let mut command = Command::new(self.bin_dir.join("psql"));
        command.args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            SUPERUSER,
            "-d",
            "postgres",
        ]);
        if let Some(password) = &self.password {
            command.env("PGPASSWORD", password);
        }
        command
    }

    /// Runs `sql` with `psql` and returns its unaligned, tuples-only output.
    pub fn query(&self, sql: &str) -> Result<String, LaunchError> {
        let mut command = self.psql();
        command.args(["-A", "-t", "-c", sql]);
        let what = format!("psql on {}", self.addr());
        let output = tool_output(command, &what)?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        }
        Err(LaunchError::Io {
            what,
            source: std::io::Error::other(String::from_utf8_lossy(&output.stderr).into_owned()),
        })
    }

    /// The server's temporary directory (data directory, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (stdout and stderr, across restarts).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// Kills the postmaster and every backend with `SIGKILL` and waits until
    /// the postmaster is reaped.
    pub async fn kill(&self) {
        self.signal_backends(Signal::SIGKILL);
        self.process.kill().await;
        self.wait_backends_gone().await;
    }

    /// Freezes the postmaster and every backend with `SIGSTOP`: connections
    /// stay open but nothing is answered.
    pub fn pause(&self) {
        // The postmaster first, so that it forks nothing we would miss.
        self.process.pause();
        self.signal_backends(Signal::SIGSTOP);
    }

    /// Unfreezes a paused server with `SIGCONT`.
    pub fn resume(&self) {
        self.signal_backends(Signal::SIGCONT);
        self.process.resume();
    }

    /// Whether the postmaster is alive (paused counts as alive).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// Whether the postmaster is alive and paused.
    pub fn is_paused(&self) -> bool {
        self.process.is_paused()
    }

    /// Kills the server if it runs, starts it again on the same port and
    /// data directory (what was committed survives), and waits until it
    /// accepts connections.
    pub async fn restart(&self) -> Result<(), LaunchError> {
        self.kill().await;
        // A killed postmaster leaves its pid file; the next one checks that
        // no process of the old one is attached to shared memory, which is
        // true once the backends are gone.
        self.process.spawn()?;
        self.wait_ready().await
    }

    fn signal_backends(&self, signal: Signal) {
        let Some(postmaster) = self.process.pid() else {
            return;
        };
        for pid in children_of(postmaster) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Waits (briefly) for backends of a killed postmaster to go, so that a
    /// restart does not find them still attached to shared memory.
    async fn wait_backends_gone(&self) {
        let data = self.dir.path().join("data").join("postmaster.pid");
        let Some(old) = fs::read_to_string(&data)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok())
        else {
            return;
        };
        for _ in 0..250 {
            if children_of(old).is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_ready(&self) -> Result<(), LaunchError> {
        wait_ready(&self.process, READY_TIMEOUT, || self.probe()).await
    }

    /// A TCP connect, then `pg_isready` saying the server accepts connections.
    async fn probe(&self) -> Result<(), String> {
        tokio::net::TcpStream::connect(self.addr())
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut command = tokio::process::Command::new(self.bin_dir.join("pg_isready"));
        command
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "1"])
            .stdin(std::process::Stdio::null());
        let output = command
            .output()
            .await
            .map_err(|e| format!("pg_isready: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_isready: {}",
                String::from_utf8_lossy(&output.stdout).trim()
            ))
        }
    }
}

impl crate::servers::Member for PostgresServer {
    fn kill(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(PostgresServer::kill(self))
    }

    fn restart(&self) -> futures::future::BoxFuture<'_, Result<(), LaunchError>> {
        Box::pin(PostgresServer::restart(self))
    }

    fn pause(&self) {
        PostgresServer::pause(self);
    }

    fn resume(&self) {
        PostgresServer::resume(self);
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Backends first (SIGKILL ends stopped processes too); dropping the
        // process then kills and reaps the postmaster.
        self.signal_backends(Signal::SIGKILL);
    }
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresServer")
            .field("addr", &self.addr())
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("process", &self.process)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// The `bin` directory of the newest PostgreSQL under `/usr/lib/postgresql`
/// that has `initdb`.
fn newest_bin_dir() -> Result<PathBuf, LaunchError> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(VERSIONS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join(INITDB.name).is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        INITDB
            .executable_at(&Path::new(VERSIONS_DIR).join("*/bin/initdb"))
            .expect_err("a glob is no file")
    })
}

/// Runs `initdb` for `data`, as the `postgres` user when we are root.
fn init_cluster(
    initdb: &Path,
    data: &Path,
    dir: &Path,
    password: Option<&str>,
    as_root: bool,
    label: &str,
) -> Result<(), LaunchError> {
    let mut command = if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", SUPERUSER, "--"]).arg(initdb);
        c
    } else {
        Command::new(initdb)
    };
    command
        .arg("-D")
        .arg(data)
        .args(["-U", SUPERUSER, "--no-sync", "--auth-local=trust"])
        .current_dir(dir);
    match password {
        Some(password) => {
            let file = dir.join("pwfile");
            let io_error = |source| LaunchError::Io {
                what: label.to_owned(),
                source,
            };
            fs::write(&file, format!("{password}\n")).map_err(io_error)?;
            if as_root {
                give_to_postgres(&file).map_err(io_error)?;
            }
            command
                .arg("--auth-host=scram-sha-256")
                .arg(format!("--pwfile={}", file.display()));
        }
        None => {
            command.arg("--auth-host=trust");
        }
    }
    run_tool(command, format!("initdb for {label}"))
}

/// A trusting cluster made by `initdb` once per machine and user, in the
/// temp dir, that servers without a password start from a copy of. Made in
/// a directory of its own and renamed into place, so concurrent test
/// processes never see half of one.
fn template(initdb: &Path, as_root: bool) -> Result<PathBuf, LaunchError> {
    let what = "a template cluster for postgres";
    let io_error = |source| LaunchError::Io {
        what: what.to_owned(),
        source,
    };
    let version = initdb
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map_or_else(
            || "unknown".to_owned(),
            |v| v.to_string_lossy().into_owned(),
        );
    let user = if as_root { "root" } else { "user" };
    let place = std::env::temp_dir().join(format!("distlock-postgres-template-{version}-{user}"));
    if place.join("PG_VERSION").is_file() {
        return Ok(place);
    }
    let making = temp_dir("distlock-postgres-template-", what)?;
    if as_root {
        give_to_postgres(making.path()).map_err(io_error)?;
    }
    let data = making.path().join("data");
    init_cluster(initdb, &data, making.path(), None, as_root, what)?;
    if fs::rename(&data, &place).is_err() && !place.join("PG_VERSION").is_file() {
        return Err(io_error(std::io::Error::other(format!(
            "could not move the new cluster to {}",
            place.display()
        ))));
    }
    Ok(place)
}

/// Copies the cluster at `from` to `to`, keeping owners and modes.
fn copy_cluster(from: &Path, to: &Path, label: &str) -> Result<(), LaunchError> {
    let mut command = Command::new("cp");
    command.arg("-a").arg(from).arg(to);
    run_tool(command, format!("copy the template cluster for {label}"))
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Makes `path` owned by the `postgres` user and group.
fn give_to_postgres(path: &Path) -> std::io::Result<()> {
    let (uid, gid) = postgres_ids()?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
}

/// The uid and gid of the `postgres` user, from `/etc/passwd`.
fn postgres_ids() -> std::io::Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&SUPERUSER) && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .ok_or_else(|| {
            std::io::Error::other(
                "no postgres user in /etc/passwd; PostgreSQL refuses to run as root \
                 (run scripts/install-servers.sh, whose postgresql package creates it)",
            )
        })
}

/// The pids of the live processes whose parent is `parent`.
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces, so split
            // after its closing parenthesis.
            let rest = &stat[stat.rfind(')')? + 1..];
            let mut fields = rest.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse::<i32>().ok()?;
            (ppid == parent && state != "Z").then_some(pid)
        })
        .collect()
}
