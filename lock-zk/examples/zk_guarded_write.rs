//! Append to a ledger only while holding a lock, with a guarded write.
//!
//! Every entry is created in one ZooKeeper transaction together with a check
//! that our lock node still exists: a client that lost its lock (a long GC
//! pause, a network partition past the session timeout) cannot write, even
//! if its request reaches the server late. The entry's name carries the
//! fencing token, so entries sort in lock order.
//!
//! Start a server (Debian: `apt-get install zookeeper`), then:
//!
//! ```text
//! DISTLOCK_URL=zk://127.0.0.1:2181/distlock-example cargo run -p distlock-zk --example zk_guarded_write
//! ```
//!
//! `DISTLOCK_URL` names the ensemble and prefix (default
//! `zk://127.0.0.1:2181/distlock-example`).

use distlock_core::LockBackendExt;
use distlock_zk::{ZkBackend, ZkConfig, zk};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DISTLOCK_URL")
        .unwrap_or_else(|_| "zk://127.0.0.1:2181/distlock-example".to_owned());
    let config = ZkConfig::from_url(&url)?;
    let ledger = format!("{}/ledger", config.prefix.trim_end_matches('/'));
    let backend = ZkBackend::connect(config).await?;

    // Setup that needs no lock goes through the raw client.
    let directory = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    backend.client().mkdir(&ledger, &directory).await?;

    let guard = backend.lock("ledger").await?;
    let entry = format!("{ledger}/entry-{:020}", guard.token().get());
    let outcomes = backend
        .guarded_write(&guard)
        .create(
            entry.clone(),
            format!("written under token {}", guard.token()).into_bytes(),
        )
        .commit()
        .await?;
    println!(
        "holding {} (token {}): {outcomes:?}",
        guard.name(),
        guard.token()
    );
    guard.release().await?;

    let entries = backend.client().list_children(&ledger).await?;
    println!(
        "{ledger} has {} entries; the latest is {}",
        entries.len(),
        entry
    );
    Ok(())
}
