//! The same program on any backend, chosen by configuration, not code:
//!
//! ```text
//! cargo run --example any_backend                                   # memory
//! DISTLOCK_URL=file:///tmp/distlock-demo cargo run --example any_backend
//! DISTLOCK_URL=etcd://127.0.0.1:2379 cargo run --features etcd --example any_backend
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --features redis --example any_backend
//! DISTLOCK_URL=zk://127.0.0.1:2181 cargo run --features zk --example any_backend
//! ```
//!
//! Settings come from the `DISTLOCK_*` environment (`DISTLOCK_TTL=15s`,
//! `DISTLOCK_PASSWORD=…`); with no `DISTLOCK_URL` it uses `memory://`.

use std::time::Duration;

use distlock::{Config, LockBackendExt};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let backend = distlock::connect_with(&config).await?;
    let caps = backend.capabilities();
    println!(
        "backend {} ({}): fencing {:?}, fifo {}, election {}",
        caps.backend,
        backend.description(),
        caps.fencing,
        caps.fifo,
        caps.election
    );

    let guard = backend
        .lock_timeout("examples/any-backend", Duration::from_secs(10))
        .await?;
    println!(
        "acquired {} with token {}, key {}",
        guard.name(),
        guard.token(),
        guard.key()
    );
    // The lease is renewed in the background while we work.
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(200)) => println!("work done, still held: {}", guard.is_held()),
        reason = guard.lost() => println!("lost the lock while working: {reason}"),
    }
    guard.release().await?;
    println!("released");
    Ok(())
}
