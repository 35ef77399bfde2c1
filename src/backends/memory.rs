//! `memory://[NAME]`: one in-process lock table per NAME, shared by every
//! `connect` in the process (as clients of one server would share it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use distlock_core::memory::MemoryBackend;
use distlock_core::{Error, Result};

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
    let settings = config.settings();
    settings.refuse_others("memory", &["ttl", "holder"])?;
    warn_once(&WARNED);
    let name = rest.trim_end_matches('/').to_owned();
    let shared = tables()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(name)
        .or_default()
        .clone();
    let backend = match settings.ttl {
        Some(ttl) => shared.with_default_ttl(ttl)?,
        None => shared,
    };
    let backend = match &settings.holder {
        Some(holder) => backend.with_holder(holder.as_str()),
        None => backend,
    };
    Ok((Arc::new(backend), Native::plain()))
}

/// Whether this process has said that `memory://` is per process.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Says once per process that `memory://` locks only this process's tasks.
///
/// The URL looks like any other, so code moved from one process to
/// several keeps working while each process gets its own table and the
/// same tokens: no error, only lost updates. A library cannot refuse it
/// (tests and single-process apps use it on purpose), so it warns.
fn warn_once(warned: &AtomicBool) {
    if !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "memory:// keeps its locks inside this process: other processes that connect to \
             memory:// get tables of their own and the same tokens, so they are not excluded; \
             use file:///DIR for the processes of one machine, or a server backend"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// Counts warnings.
    #[derive(Default)]
    struct Warnings(AtomicUsize);

    impl Subscriber for Warnings {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            if *event.metadata().level() == Level::WARN {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn the_per_process_warning_is_given_once() {
        let warnings = std::sync::Arc::new(Warnings::default());
        let warned = AtomicBool::new(false);
        tracing::subscriber::with_default(warnings.clone(), || {
            super::warn_once(&warned);
            super::warn_once(&warned);
        });
        assert_eq!(warnings.0.load(Ordering::Relaxed), 1);
    }
}
