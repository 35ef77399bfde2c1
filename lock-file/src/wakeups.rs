//! Same-process wake-ups: a released lock wakes this process's waiters at once.
//!
//! Waiters in other processes poll (1 ms doubling to 20 ms, 2 ms for the
//! one whose turn is next), which is what bounds a cross-process hand-off;
//! the waiters' queue ([`crate::queue`]) keeps this process's waiters from
//! always winning. Waiters in the same process, which is the
//! common case for a benchmark or a server with many tasks, are also woken
//! through a [`Notify`] per record path, so they do not wait for their next poll.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::Notify;

type Registry = Mutex<HashMap<PathBuf, Weak<Notify>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// The wake-up for `path`, shared by everyone in this process waiting on it.
pub(crate) fn subscribe(path: &Path) -> Arc<Notify> {
    let mut map = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(notify) = map.get(path).and_then(Weak::upgrade) {
        return notify;
    }
    if map.len() >= 1024 {
        map.retain(|_, weak| weak.strong_count() > 0);
    }
    let notify = Arc::new(Notify::new());
    map.insert(path.to_owned(), Arc::downgrade(&notify));
    notify
}

/// Wakes everyone in this process waiting on `path`.
pub(crate) fn notify(path: &Path) {
    let map = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(notify) = map.get(path).and_then(Weak::upgrade) {
        notify.notify_waiters();
    }
}
