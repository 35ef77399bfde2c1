//! Test hooks (feature `testing`): ending a lease from outside, as the
//! server would on expiry, for the backends whose server is this process
//! (`memory://`) or this machine (`file://`).
//!
//! Network backends have their own outside: revoke the etcd lease, `DEL` the
//! Redis key, delete the ZooKeeper node.

use distlock_core::{Error, LockGuard, Result};
use distlock_file::{FileBackend, FileConfig};

use crate::scheme::Scheme;

/// Ends the lease behind `guard`, a lock or leadership taken from the backend
/// at `url`, as if its TTL had run out. Returns whether it was still held.
///
/// The holder's lost signal fires (at once for `memory://`, at its next
/// renewal for `file://`) and the next holder gets a greater token.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
/// use distlock::LockBackendExt;
/// let backend = distlock::connect("memory://expire-doc").await?;
/// let guard = backend.lock("jobs/report").await?;
/// assert!(distlock::testing::expire_now("memory://expire-doc", &guard).await?);
/// guard.lost().await;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// Not cancel safe for `file://`: a cancelled call may or may not have ended
/// the lease. Cancel safe for `memory://`, which does not wait.
pub async fn expire_now(url: &str, guard: &LockGuard) -> Result<bool> {
    match Scheme::of_url(url)? {
        Scheme::Memory => Ok(distlock_core::memory::expire_key(guard.key())),
        Scheme::File => {
            let backend = FileBackend::connect(FileConfig::from_url(url)?).await?;
            backend.expire_now(guard.name()).await
        }
        other => Err(Error::unsupported(format!(
            "distlock::testing::expire_now ends memory:// and file:// leases only, not \
             {other}://; end a network lease on its server (revoke the etcd lease, DEL the \
             Redis key, delete the ZooKeeper node)"
        ))),
    }
}
