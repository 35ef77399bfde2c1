//! Finding the programs and jars the launchers run.

use std::env;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::LaunchError;

/// Something a launcher needs, and the Debian package that provides it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requirement {
    /// The program name looked up on `PATH` (or a label for a file).
    pub(crate) name: &'static str,
    /// The Debian package that installs it.
    pub(crate) package: &'static str,
}

impl Requirement {
    /// Resolves an explicit path if given, otherwise looks `name` up on `PATH`.
    pub(crate) fn resolve(self, explicit: Option<&Path>) -> Result<PathBuf, LaunchError> {
        match explicit {
            Some(path) => self.executable_at(path),
            None => self.on_path(),
        }
    }

    /// The first executable called `name` in a `PATH` directory.
    pub(crate) fn on_path(self) -> Result<PathBuf, LaunchError> {
        env::var_os("PATH")
            .iter()
            .flat_map(env::split_paths)
            .map(|dir| dir.join(self.name))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| self.missing("on PATH".to_owned()))
    }

    /// `path` itself, if it is an executable file.
    pub(crate) fn executable_at(self, path: &Path) -> Result<PathBuf, LaunchError> {
        if is_executable(path) {
            Ok(path.to_owned())
        } else {
            Err(self.missing(format!("at {}", path.display())))
        }
    }

    /// `path` itself, if it is a regular file (a jar, say).
    pub(crate) fn file_at(self, path: &Path) -> Result<PathBuf, LaunchError> {
        if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(self.missing(format!("at {}", path.display())))
        }
    }

    fn missing(self, location: String) -> LaunchError {
        LaunchError::Missing {
            program: self.name.to_owned(),
            location,
            package: self.package,
        }
    }
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
