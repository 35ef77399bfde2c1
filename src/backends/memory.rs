//! `memory://[NAME]`: one in-process lock table per NAME, shared by every
//! `connect` in the process (as clients of one server would share it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use lock_core::memory::MemoryBackend;
use lock_core::{Error, Result};

use super::{Services, unsupported_setting};
use crate::config::Config;

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
    if config.username.is_some() || config.password.is_some() {
        return Err(unsupported_setting("memory", "credentials"));
    }
    for (set, setting) in [
        (!config.tls.is_empty(), "TLS"),
        (config.prefix.is_some(), "prefix"),
        (config.layout.is_some(), "layout"),
        (config.fsync.is_some(), "fsync"),
    ] {
        if set {
            return Err(unsupported_setting("memory", setting));
        }
    }
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
    Ok((Arc::new(backend.clone()), Some(Arc::new(backend))))
}
