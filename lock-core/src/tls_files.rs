//! The three TLS files a backend may be given, under one name in every
//! backend's config: [`TlsFiles`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The PEM files of a TLS connection, as the settings `tls.ca`, `tls.cert`
/// and `tls.key` name them. Every backend that speaks TLS keeps them in
/// one of these, so a path means the same thing whichever backend it is
/// given to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsFiles {
    /// `tls.ca`: CA certificates to verify the server's certificate
    /// against, instead of the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// `tls.cert`: the client's certificate (chain), for servers that
    /// authenticate clients by certificate. Needs [`key`](Self::key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// `tls.key`: the private key of [`cert`](Self::cert).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether no file is given.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    /// Sets the file the setting `name` (`tls.ca`, `tls.cert` or
    /// `tls.key`) names to `value`. Returns `false`, changing nothing, for
    /// any other name, so that a URL parser can try this before its own
    /// options.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        let slot = match name {
            "tls.ca" => &mut self.ca,
            "tls.cert" => &mut self.cert,
            "tls.key" => &mut self.key,
            _ => return false,
        };
        *slot = Some(PathBuf::from(value));
        true
    }

    /// `InvalidConfig` unless the client certificate and its key are given
    /// together: one without the other cannot authenticate, and silently
    /// connecting without would hide the mistake until the server refuses.
    pub fn check(&self, backend: &str) -> Result<()> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(Error::invalid_config(format!(
                "{backend} tls.cert and tls.key must be given together"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn set_takes_the_three_names_and_nothing_else() {
        let mut files = TlsFiles::default();
        assert!(files.is_empty());
        assert!(files.set("tls.ca", "/ca.pem"));
        assert!(files.set("tls.cert", "/c.pem"));
        assert!(files.set("tls.key", "/k.pem"));
        assert!(!files.set("tls", "true"));
        assert!(!files.set("sslrootcert", "/other.pem"));
        assert_eq!(
            files,
            TlsFiles {
                ca: Some("/ca.pem".into()),
                cert: Some("/c.pem".into()),
                key: Some("/k.pem".into()),
            }
        );
        assert!(!files.is_empty());
    }

    #[test]
    fn check_wants_the_certificate_and_key_together() {
        let ca_only = TlsFiles {
            ca: Some("/ca.pem".into()),
            ..TlsFiles::default()
        };
        ca_only.check("etcd").unwrap();
        TlsFiles::default().check("etcd").unwrap();
        for half in [
            TlsFiles {
                cert: Some("/c.pem".into()),
                ..TlsFiles::default()
            },
            TlsFiles {
                key: Some("/k.pem".into()),
                ..TlsFiles::default()
            },
        ] {
            let err = half.check("Redis").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert_eq!(
                err.message(),
                "Redis tls.cert and tls.key must be given together"
            );
        }
    }

    #[test]
    fn serde_uses_the_setting_names_and_leaves_unset_files_out() {
        let files: TlsFiles = serde_json::from_str(r#"{"ca":"/ca.pem"}"#).unwrap();
        assert_eq!(files.ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert_eq!(
            serde_json::to_string(&files).unwrap(),
            r#"{"ca":"/ca.pem"}"#
        );
        assert!(serde_json::from_str::<TlsFiles>(r#"{"ca_cert":"/x"}"#).is_err());
    }
}
