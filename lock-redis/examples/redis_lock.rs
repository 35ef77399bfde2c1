//! Take a Redis lock, use its fencing token, see it as an operator would
//! (`inspect`), and watch for its loss.
//!
//! ```text
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run -p distlock-redis --example redis_lock
//! ```
//!
//! `DISTLOCK_URL` names the server (default `redis://127.0.0.1:6379`); with
//! `redlock://h1:6379,h2:6379,h3:6379` it uses the Redlock quorum.

use std::time::Duration;

use distlock_core::{DynLockBackend, LockBackendExt};
use distlock_redis::{RedisBackend, RedlockBackend};

#[tokio::main]
async fn main() -> distlock_core::Result<()> {
    let url = std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let backend: Box<DynLockBackend> = if url.starts_with("redlock://") {
        Box::new(RedlockBackend::connect_url(&url).await?)
    } else {
        Box::new(RedisBackend::connect_url(&url).await?)
    };
    println!("capabilities: {:?}", backend.capabilities());

    let guard = backend
        .lock_timeout("examples/nightly-report", Duration::from_secs(10))
        .await?;
    println!(
        "holding {} with fencing token {}; pass the token to every write",
        guard.name(),
        guard.token()
    );
    // What `distlock status` shows: the holder's description (here the
    // default `host:pid`), token and lease left.
    let status = backend.inspect(guard.name()).await?;
    if let Some(holder) = &status.holder {
        println!(
            "inspect: held by {} (token {}, {:?} left), {} waiting",
            holder.description.as_deref().unwrap_or("?"),
            holder.token,
            holder.lease_left,
            status.waiting
        );
    }

    // Do the work, but stop as soon as the lock is lost (renewal failed,
    // key deleted, or the local validity deadline passed).
    tokio::select! {
        reason = guard.lost() => println!("lock lost: {reason}; stop writing"),
        () = tokio::time::sleep(Duration::from_secs(2)) => println!("work done"),
    }
    match guard.release().await {
        Ok(()) => println!("released"),
        Err(e) => println!("release reported: {e}"),
    }
    Ok(())
}
