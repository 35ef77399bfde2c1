//! A MariaDB server: a fresh data directory in a temporary directory, a
//! test user with a password, and a database for it.
//!
//! `mariadb-install-db` makes a data directory once per machine
//! (`distlock-mariadb-template-*` in the temp dir; delete it to make it
//! again) and every server starts from a copy of it, which saves about four
//! seconds per server. When the tests run as root the data directory is
//! handed to the `mysql` user (which Debian's package creates) and the
//! server drops to it (`--user=mysql`); `mariadbd` is one process, so
//! signalling it signals the whole server.
//!
//! The launcher logs in as the OS user over the server's unix socket
//! (`unix_socket` authentication, which `mariadb-install-db` sets up for
//! `root`) to create the test user, `'distlock'@'%'` and
//! `'distlock'@'localhost'` both, with its password and every privilege
//! on the databases named `distlock_…` (so that a test can name one that
//! does not exist and be told so), and its database. The
//! server listens on a loopback port only, resolves no host names, and
//! writes no binary log.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use super::LaunchError;
use super::binary::Requirement;
use super::ports::free_port;
use super::process::{ChildProcess, process_controls, run_tool, tool_output};
use super::readiness::wait_ready;
use super::workdir::temp_dir;

/// How long a server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The server program.
const MARIADBD: Requirement = Requirement {
    name: "mariadbd",
    package: "mariadb-server",
};
/// The data directory initialiser.
const INSTALL_DB: Requirement = Requirement {
    name: "mariadb-install-db",
    package: "mariadb-server",
};
/// The command-line client.
const CLIENT: Requirement = Requirement {
    name: "mariadb",
    package: "mariadb-client",
};
/// Where Debian installs the server program (not on a user's `PATH`).
const SBIN: &str = "/usr/sbin";
/// The redo log's size: the default 96 MiB would be copied for every server.
const LOG_FILE_SIZE: &str = "--innodb-log-file-size=8M";
/// The OS user the server runs as when the tests run as root.
const OS_USER: &str = "mysql";
/// The test user's name.
pub const TEST_USER: &str = "distlock";
/// The test user's password unless [`MariadbOptions::password`] says otherwise.
pub const TEST_PASSWORD: &str = "distlock-test";
/// The test user's database.
pub const TEST_DATABASE: &str = "distlock_test";

/// How to launch a [`MariadbServer`].
#[derive(Clone)]
pub struct MariadbOptions {
    password: String,
    durable: bool,
}

impl Default for MariadbOptions {
    fn default() -> Self {
        MariadbOptions {
            password: TEST_PASSWORD.to_owned(),
            durable: false,
        }
    }
}

impl MariadbOptions {
    /// The test user with [`TEST_PASSWORD`], commits flushed once a second.
    pub fn new() -> Self {
        Self::default()
    }

    /// The test user logs in with `password`.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = password.into();
        self
    }

    /// Makes every commit durable (`innodb_flush_log_at_trx_commit=1`).
    /// Off by default (`2`: written at commit, flushed once a second):
    /// tests are faster, and a killed server still keeps what it committed,
    /// since only an OS crash loses unflushed writes.
    pub fn durable(mut self, on: bool) -> Self {
        self.durable = on;
        self
    }
}

impl fmt::Debug for MariadbOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MariadbOptions")
            .field("password", &"<redacted>")
            .field("durable", &self.durable)
            .finish()
    }
}

/// One running MariaDB server; dropping it kills the server and removes
/// its data directory.
pub struct MariadbServer {
    port: u16,
    password: String,
    client: PathBuf,
    // Declared before `dir`: the process dies before its directory goes.
    process: ChildProcess,
    dir: TempDir,
}

impl MariadbServer {
    /// Starts a server with the test user and database, and waits until it
    /// accepts connections.
    pub async fn start() -> Result<Self, LaunchError> {
        Self::start_with(MariadbOptions::new()).await
    }

    /// Starts a server as described by `options` and waits until it is
    /// ready, with the test user and database created.
    pub async fn start_with(options: MariadbOptions) -> Result<Self, LaunchError> {
        let server = Self::spawn(&options)?;
        server.wait_ready().await?;
        server.create_test_user()?;
        Ok(server)
    }

    fn spawn(options: &MariadbOptions) -> Result<Self, LaunchError> {
        let install_db = INSTALL_DB.on_path()?;
        let mariadbd = MARIADBD
            .on_path()
            .or_else(|_| MARIADBD.executable_at(&Path::new(SBIN).join(MARIADBD.name)))?;
        let client = CLIENT.on_path()?;
        let port = free_port();
        let label = format!("mariadb (127.0.0.1:{port})");
        let dir = temp_dir("distlock-mariadb-", &label)?;
        let io_error = |source| LaunchError::Io {
            what: label.clone(),
            source,
        };
        let as_root = running_as_root();
        if as_root {
            give_to_mysql(dir.path()).map_err(io_error)?;
        }
        let data = dir.path().join("data");
        copy_data_dir(&template(&install_db, as_root)?, &data, &label)?;
        let flush = if options.durable { "1" } else { "2" };
        let mut args: Vec<OsString> = vec![
            "--no-defaults".into(),
            format!("--datadir={}", data.display()).into(),
            format!("--port={port}").into(),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", socket_path(dir.path()).display()).into(),
            format!("--pid-file={}", dir.path().join("mariadb.pid").display()).into(),
            "--skip-log-bin".into(),
            "--skip-name-resolve".into(),
            "--max-connections=500".into(),
            "--innodb-buffer-pool-size=64M".into(),
            LOG_FILE_SIZE.into(),
            format!("--innodb-flush-log-at-trx-commit={flush}").into(),
        ];
        if as_root {
            args.push(format!("--user={OS_USER}").into());
        }
        let process = ChildProcess::new(label, mariadbd, args, dir.path(), "mariadb.log");
        process.spawn()?;
        Ok(Self {
            port,
            password: options.password.clone(),
            client,
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

    /// The test user's URL with its password:
    /// `mysql://distlock:PASSWORD@127.0.0.1:PORT/distlock_test`.
    pub fn url(&self) -> String {
        format!(
            "mysql://{TEST_USER}:{}@127.0.0.1:{}/{TEST_DATABASE}",
            self.password, self.port
        )
    }

    /// The test user's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A `mariadb` client command logged in as the test user over TCP, in
    /// the test database, batch mode without column names, ready for
    /// `-e SQL` arguments. The password goes in the environment, not on
    /// the command line.
    pub fn client(&self) -> Command {
        let mut command = Command::new(&self.client);
        command
            .args([
                "--no-defaults",
                "--protocol=tcp",
                "-h",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
                "-u",
                TEST_USER,
                "--batch",
                "--skip-column-names",
                TEST_DATABASE,
            ])
            .env("MYSQL_PWD", &self.password);
        command
    }

    /// Runs `sql` as the server's superuser (over the unix socket) and
    /// returns its tab-separated output.
    pub fn query(&self, sql: &str) -> Result<String, LaunchError> {
        let mut command = self.superuser();
        command.args(["--batch", "--skip-column-names", "-e", sql]);
        let what = format!("mariadb on {}", self.addr());
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

    /// Kills the server if it runs, starts it again on the same port and
    /// data directory (what was committed survives), and waits until it
    /// accepts connections.
    pub async fn restart(&self) -> Result<(), LaunchError> {
        self.kill().await;
        self.process.spawn()?;
        self.wait_ready().await
    }

    /// The `mariadb` client as the superuser over the unix socket.
    fn superuser(&self) -> Command {
        let mut command = Command::new(&self.client);
        command.arg("--no-defaults").arg(format!(
            "--socket={}",
            socket_path(self.dir.path()).display()
        ));
        command.args(["-u", &os_user()]);
        command
    }

    /// Creates the test user (for any host and for `localhost`, which the
    /// server would otherwise match to an anonymous user first) and its
    /// database; removes anonymous users.
    fn create_test_user(&self) -> Result<(), LaunchError> {
        let password = self.password.replace('\\', "\\\\").replace('\'', "\\'");
        let sql = format!(
            "DROP USER IF EXISTS ''@'localhost'; \
             CREATE DATABASE IF NOT EXISTS {TEST_DATABASE}; \
             CREATE OR REPLACE USER '{TEST_USER}'@'%' IDENTIFIED BY '{password}'; \
             CREATE OR REPLACE USER '{TEST_USER}'@'localhost' IDENTIFIED BY '{password}'; \
             GRANT ALL ON `distlock\\_%`.* TO '{TEST_USER}'@'%'; \
             GRANT ALL ON `distlock\\_%`.* TO '{TEST_USER}'@'localhost'; \
             GRANT PROCESS, CONNECTION ADMIN ON *.* TO '{TEST_USER}'@'%'; \
             GRANT PROCESS, CONNECTION ADMIN ON *.* TO '{TEST_USER}'@'localhost';"
        );
        let mut command = self.superuser();
        command.args(["-e", &sql]);
        // The SQL holds the password: keep it out of the error's label.
        run_tool(command, format!("create the test user on {}", self.addr()))
    }

    async fn wait_ready(&self) -> Result<(), LaunchError> {
        wait_ready(&self.process, READY_TIMEOUT, || self.probe()).await
    }

    /// A TCP connect, then `SELECT 1` over the unix socket.
    async fn probe(&self) -> Result<(), String> {
        tokio::net::TcpStream::connect(self.addr())
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut command = tokio::process::Command::from(self.superuser());
        command
            .args(["-e", "SELECT 1"])
            .stdin(std::process::Stdio::null());
        let output = command
            .output()
            .await
            .map_err(|e| format!("mariadb: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "mariadb: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }
}

process_controls!(MariadbServer);

impl fmt::Debug for MariadbServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MariadbServer")
            .field("addr", &self.addr())
            .field("password", &"<redacted>")
            .field("process", &self.process)
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("mariadb.sock")
}

/// A data directory made by `mariadb-install-db` once per machine and user,
/// in the temp dir, that servers start from a copy of. Made in a directory
/// of its own and renamed into place, so concurrent test processes never
/// see half of one.
fn template(install_db: &Path, as_root: bool) -> Result<PathBuf, LaunchError> {
    let what = "a template data directory for mariadb";
    let io_error = |source| LaunchError::Io {
        what: what.to_owned(),
        source,
    };
    let user = if as_root { "root" } else { "user" };
    let place = std::env::temp_dir().join(format!("distlock-mariadb-template-8m-{user}"));
    if place.join("mysql").is_dir() {
        return Ok(place);
    }
    let making = temp_dir("distlock-mariadb-template-", what)?;
    if as_root {
        give_to_mysql(making.path()).map_err(io_error)?;
    }
    let data = making.path().join("data");
    let mut command = Command::new(install_db);
    command
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args([
            "--skip-test-db",
            "--auth-root-authentication-method=socket",
            LOG_FILE_SIZE,
        ])
        .current_dir(making.path());
    if as_root {
        command.arg(format!("--user={OS_USER}"));
    }
    run_tool(command, format!("mariadb-install-db for {what}"))?;
    if fs::rename(&data, &place).is_err() && !place.join("mysql").is_dir() {
        return Err(io_error(std::io::Error::other(format!(
            "could not move the new data directory to {}",
            place.display()
        ))));
    }
    Ok(place)
}

/// Copies the data directory at `from` to `to`, keeping owners and modes.
fn copy_data_dir(from: &Path, to: &Path, label: &str) -> Result<(), LaunchError> {
    let mut command = Command::new("cp");
    command.arg("-a").arg(from).arg(to);
    run_tool(
        command,
        format!("copy the template data directory for {label}"),
    )
}

fn running_as_root() -> bool {
    os_user() == "root"
}

/// The OS user the tests run as, which `unix_socket` logs in by name.
fn os_user() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|_| "root".to_owned())
}

/// Makes `path` owned by the `mysql` user and group.
fn give_to_mysql(path: &Path) -> std::io::Result<()> {
    let (uid, gid) = mysql_ids()?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
}

/// The uid and gid of the `mysql` user, from `/etc/passwd`.
fn mysql_ids() -> std::io::Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&OS_USER) && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .ok_or_else(|| {
            std::io::Error::other(
                "no mysql user in /etc/passwd; run scripts/install-servers.sh, whose \
                 mariadb-server package creates it",
            )
        })
}
