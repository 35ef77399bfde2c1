//! Test hooks (feature `testing`): ending an in-memory lease from outside,
//! as a server-side expiry would, knowing only the guard's key.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::table::Table;

/// Every live table in the process, so a key can be found without the backend.
static TABLES: Mutex<Vec<Weak<Table>>> = Mutex::new(Vec::new());

fn tables() -> MutexGuard<'static, Vec<Weak<Table>>> {
    TABLES.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn register(table: &Arc<Table>) {
    let mut tables = tables();
    tables.retain(|t| t.strong_count() > 0);
    tables.push(Arc::downgrade(table));
}

/// Ends the lease of the in-memory lock or leadership whose guard key is
/// `key` ([`LockGuard::key`](crate::LockGuard::key)), in whichever
/// [`MemoryBackend`](super::MemoryBackend) of this process holds it, as if
/// its TTL had run out. Returns whether it was still held.
///
/// Keys are unique in the process, so this ends exactly that acquisition.
pub fn expire_key(key: &str) -> bool {
    let live: Vec<Arc<Table>> = tables().iter().filter_map(Weak::upgrade).collect();
    live.iter().any(|table| table.expire_key(key))
}

#[cfg(test)]
mod tests {
    use crate::LockBackendExt;
    use crate::memory::MemoryBackend;

    /// Two servers with the same lock name: the key ends exactly one lease.
    #[tokio::test]
    async fn a_key_ends_only_its_own_lease() {
        let (one, two) = (MemoryBackend::new(), MemoryBackend::new());
        let a = one.lock("same").await.unwrap();
        let b = two.lock("same").await.unwrap();
        assert_ne!(a.key(), b.key());
        assert!(super::expire_key(a.key()));
        a.lost().await;
        assert!(b.is_held());
        assert!(!super::expire_key(a.key()), "already ended");
        let key = b.key().to_owned();
        b.release().await.unwrap();
        assert!(!super::expire_key(&key), "released");
    }
}
