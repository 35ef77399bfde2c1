//! `file:///DIR`: lock files shared by the processes of one machine.

use std::sync::Arc;

use lock_core::Result;
use lock_file::{FileBackend, FileConfig};

use super::{Services, unsupported_setting};
use crate::config::Config;

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let mut file = FileConfig::from_url(url)?;
    if config.username.is_some() || config.password.is_some() {
        return Err(unsupported_setting(
            "file",
            "credentials (access follows the directory's permissions)",
        ));
    }
    if !config.tls.is_empty() {
        return Err(unsupported_setting("file", "TLS"));
    }
    if config.prefix.is_some() {
        return Err(unsupported_setting(
            "file",
            "prefix (the directory in the URL holds the locks)",
        ));
    }
    if config.layout.is_some() {
        return Err(unsupported_setting("file", "layout"));
    }
    if let Some(ttl) = config.ttl {
        file = file.with_default_ttl(ttl)?;
    }
    if let Some(timeout) = config.request_timeout {
        file = file.with_request_timeout(timeout);
    }
    if let Some(fsync) = config.fsync {
        file = file.with_fsync(fsync);
    }
    let backend = FileBackend::connect(file).await?;
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}
