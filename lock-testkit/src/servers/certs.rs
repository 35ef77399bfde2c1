//! Throwaway TLS certificates for test servers, made with `openssl`: a CA,
//! a server certificate for `127.0.0.1`/`localhost` signed by it, a client
//! certificate signed by it, and an unrelated CA that trusts none of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::LaunchError;
use super::binary::Requirement;

const OPENSSL: Requirement = Requirement {
    name: "openssl",
    package: "openssl",
};

/// Extensions of a leaf certificate usable by a server on loopback and by
/// a client.
const LEAF_EXTENSIONS: &str = "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
     basicConstraints=critical,CA:FALSE\n\
     keyUsage=critical,digitalSignature,keyEncipherment\n\
     extendedKeyUsage=serverAuth,clientAuth\n";

/// A set of PEM files in a temporary directory, deleted on drop.
#[derive(Debug)]
pub struct TestCerts {
    dir: TempDir,
}

impl TestCerts {
    /// Makes a CA, a server and a client certificate signed by it, and a
    /// second, unrelated CA. Takes a few tens of milliseconds (P-256 keys).
    pub fn generate() -> Result<Self, LaunchError> {
        let openssl = OPENSSL.on_path()?;
        let dir = super::temp_dir("distlock-certs-", "a directory for test certificates")?;
        let run = |args: &[&str]| run(&openssl, dir.path(), args);
        std::fs::write(dir.path().join("leaf.ext"), LEAF_EXTENSIONS).map_err(|source| {
            LaunchError::Io {
                what: "the certificate extensions file".to_owned(),
                source,
            }
        })?;
        for ca in ["ca", "other-ca"] {
            run(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=distlock test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ])?;
        }
        for leaf in ["server", "client"] {
            run(&[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN=distlock test {leaf}"),
                "-keyout",
                &format!("{leaf}.key"),
                "-out",
                &format!("{leaf}.csr"),
            ])?;
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{leaf}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
                "-out",
                &format!("{leaf}.pem"),
            ])?;
        }
        Ok(Self { dir })
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The CA that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// A CA that signed nothing here: a client trusting it rejects the server.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }

    /// The server certificate (for `127.0.0.1` and `localhost`).
    pub fn server_cert(&self) -> PathBuf {
        self.path("server.pem")
    }

    /// The server's private key.
    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    /// A client certificate signed by [`TestCerts::ca`].
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.pem")
    }

    /// The client's private key.
    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }
}

fn run(openssl: &Path, dir: &Path, args: &[&str]) -> Result<(), LaunchError> {
    let mut command = Command::new(openssl);
    command.args(args).current_dir(dir);
    super::process::run_tool(command, format!("openssl {}", args.join(" ")))
}
