//! `file:///DIR`: lock files shared by the processes of one machine.

use std::sync::Arc;

use distlock_core::Result;
use distlock_file::{FileBackend, FileConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

/// The file config for `url`, with the [`Config`] settings applied over it.
pub(super) fn file_config(url: &str, config: &Config) -> Result<FileConfig> {
    FileConfig::from_url(url)?.with_settings(&config.settings())
}

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let backend = FileBackend::connect(file_config(url, config)?).await?;
    Ok((Arc::new(backend), Native::plain()))
}
