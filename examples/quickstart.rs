//! Quickstart: four workers take turns on one lock and print their fencing
//! tokens. Runs in memory, no server needed; `DISTLOCK_URL` picks another
//! backend:
//!
//! ```text
//! cargo run --example quickstart
//! DISTLOCK_URL=file:///tmp/distlock-demo cargo run --example quickstart
//! ```

use std::time::Duration;

use distlock::{Config, LockBackendExt};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let backend = distlock::connect_with(&config).await?;
    println!("backend: {}", backend.description());

    let mut workers = Vec::new();
    for worker in 0..4 {
        let backend = backend.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..2 {
                let guard = backend.lock("quickstart/report").await?;
                println!(
                    "worker {worker} holds {} with fencing token {}",
                    guard.name(),
                    guard.token()
                );
                tokio::time::sleep(Duration::from_millis(20)).await; // the critical section
                guard.release().await?;
            }
            distlock::Result::Ok(())
        }));
    }
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }

    let held = backend.lock("quickstart/report").await?;
    let busy = backend.try_lock("quickstart/report").await.unwrap_err();
    println!("while held, try_lock says: {busy}");
    held.release().await?;

    // A lock held for a scope: released before `with_lock` returns.
    let token = backend
        .with_lock("quickstart/report", |held| async move { held.token() })
        .await?;
    println!("with_lock ran with token {token} and released it");
    println!("done: every holder got a larger token than the one before");
    Ok(())
}
