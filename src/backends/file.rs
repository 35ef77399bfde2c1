//! `file:///DIR`: lock files shared by the processes of one machine.

use std::sync::Arc;

use distlock_core::Result;
use distlock_file::{FileBackend, FileConfig};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

pub(super) async fn connect(url: &str, config: &Config) -> Result<Services> {
    let file = FileConfig::from_url(url)?.with_settings(&config.settings())?;
    let backend = FileBackend::connect(file).await?;
    Ok((Arc::new(backend), Native::Plain))
}
