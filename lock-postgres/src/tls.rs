//! The TLS connector: rustls with the ring provider, trusting the PEM file
//! of `tls.ca` or else the system's roots, always verifying the
//! server's certificate and host name.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use distlock_core::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{PostgresConfig, SslMode};

/// The connector for `config`; with `sslmode=disable` it is never used,
/// so it trusts nothing.
pub(crate) fn connector(config: &PostgresConfig) -> Result<MakeRustlsConnect> {
    let roots = match (config.sslmode(), &config.tls.ca) {
        (SslMode::Disable, _) => RootCertStore::empty(),
        (_, Some(path)) => {
            let bad = |why: String| {
                Error::invalid_config(format!("postgres tls.ca {}: {why}", path.display()))
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in the file".into()));
            }
            let mut roots = RootCertStore::empty();
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
            roots
        }
        (_, None) => system_roots().clone(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid_config(format!("postgres TLS: {e}")))?
        .with_root_certificates(roots);
    let tls = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) if config.sslmode() != SslMode::Disable => {
            let (chain, key) = client_identity(cert, key)?;
            tls.with_client_auth_cert(chain, key)
                .map_err(|e| Error::invalid_config(format!("postgres tls.cert/tls.key: {e}")))?
        }
        _ => tls.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(tls))
}

/// The client certificate chain and its private key, read from PEM files.
fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let bad = |what: &str, path: &Path, why: String| {
        Error::invalid_config(format!("postgres {what} {}: {why}", path.display()))
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("tls.cert", cert, e.to_string()))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad("tls.cert", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad("tls.cert", cert, "no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("tls.key", key, e.to_string()))?;
    Ok((chain, key))
}

/// The system's root certificates, read once per process: reading and
/// parsing them takes long enough to slow every new connection.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        roots
    })
}
