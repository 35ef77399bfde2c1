//! `memory://[NAME]`: one in-process lock table per NAME, shared by every
//! `connect` in the process (as clients of one server would share it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use lock_core::memory::MemoryBackend;
use lock_core::{Error, Result};

use super::Services;
use crate::config::Config;
use crate::guarded::Native;

fn tables() -> &'static Mutex<HashMap<String, MemoryBackend>> {
    static TABLES: OnceLock<Mutex<HashMap<String, MemoryBackend>>> = OnceLock::new();
    TABLES.get_or_init(Default::default)
}

pub(super) fn connect(url: &str, config: &Config) -> Result<Services> {
    let rest = &url["memory://".len()..];
    if rest.contains(['?', '#', '@']) {
        return Err(Error::invalid_config(format!(
            "memory URL {url:?} takes no options or credentials; use memory:// or memory://NAME"
        )));
    }
    config
        .settings()
        .refuse_others("memory", &["ttl", "holder"])?;
    let name = rest.trim_end_matches('/').to_owned();
    let shared = tables()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(name)
        .or_default()
        .clone();
    let backend = match config.ttl {
        Some(ttl) => shared.with_default_ttl(ttl)?,
        None => shared,
    };
    let backend = match &config.holder {
        Some(holder) => backend.with_holder(holder.as_str()),
        None => backend,
    };
    Ok((Arc::new(backend), Native::Plain))
}
