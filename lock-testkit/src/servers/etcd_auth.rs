//! etcd's authentication for test clusters: a root user, least-privilege
//! users limited to a key prefix, and `auth enable`, all set up with
//! `etcdctl` once the cluster is healthy.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::LaunchError;
use super::binary::Requirement;

const ETCDCTL: Requirement = Requirement {
    name: "etcdctl",
    package: "etcd-client",
};

/// The `etcdctl` on `PATH`, for tests that run it as a peer client; the
/// error names its Debian package when it is missing.
pub fn etcdctl_path() -> Result<PathBuf, LaunchError> {
    ETCDCTL.on_path()
}

/// A user that may read and write only the keys starting with a prefix
/// (`etcdctl role grant-permission --prefix=true <role> readwrite <prefix>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUser {
    /// The user name; its role gets the same name.
    pub name: String,
    /// The password.
    pub password: String,
    /// The only key range the user may touch: every key starting with this.
    pub prefix: String,
}

impl EtcdUser {
    /// A user named `name` with `password`, allowed only keys starting
    /// with `prefix`.
    pub fn new(
        name: impl Into<String>,
        password: impl Into<String>,
        prefix: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            password: password.into(),
            prefix: prefix.into(),
        }
    }
}

/// What a cluster's auth mode sets up: a `root` user and a few others.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AuthSetup {
    pub(crate) root_password: String,
    pub(crate) users: Vec<EtcdUser>,
}

/// Leaves out the passwords.
impl std::fmt::Debug for AuthSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<(&str, &str)> = self
            .users
            .iter()
            .map(|u| (u.name.as_str(), u.prefix.as_str()))
            .collect();
        f.debug_struct("AuthSetup")
            .field("users", &users)
            .finish_non_exhaustive()
    }
}

/// How `etcdctl` reaches the cluster.
#[derive(Debug, Clone)]
pub(crate) struct Etcdctl {
    binary: PathBuf,
    endpoint: String,
    /// `--cacert` for a TLS cluster.
    ca: Option<PathBuf>,
}

impl Etcdctl {
    pub(crate) fn new(
        explicit: Option<&Path>,
        endpoint: String,
        ca: Option<PathBuf>,
    ) -> Result<Self, LaunchError> {
        Ok(Self {
            binary: ETCDCTL.resolve(explicit)?,
            endpoint,
            ca,
        })
    }

    /// Creates the users and roles, then enables auth.
    pub(crate) fn enable_auth(&self, setup: &AuthSetup) -> Result<(), LaunchError> {
        self.run(&["user", "add", &format!("root:{}", setup.root_password)])?;
        self.run(&["user", "grant-role", "root", "root"])?;
        for user in &setup.users {
            self.run(&["user", "add", &format!("{}:{}", user.name, user.password)])?;
            self.run(&["role", "add", &user.name])?;
            self.run(&[
                "role",
                "grant-permission",
                "--prefix=true",
                &user.name,
                "readwrite",
                &user.prefix,
            ])?;
            self.run(&["user", "grant-role", &user.name, &user.name])?;
        }
        self.run(&["auth", "enable"])
    }

    /// Runs one `etcdctl` command; the error shows its output, never the
    /// arguments (they may hold a password).
    fn run(&self, args: &[&str]) -> Result<(), LaunchError> {
        let mut command = Command::new(&self.binary);
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(args);
        if let Some(ca) = &self.ca {
            command.arg(format!("--cacert={}", ca.display()));
        }
        let what = format!("etcdctl {} {} at {}", args[0], args[1], self.endpoint);
        super::process::run_tool(command, what)
    }
}
