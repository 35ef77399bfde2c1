//! A semaphore and a read-write lock. Runs in memory, no server needed;
//! `DISTLOCK_URL` picks another backend:
//!
//! ```text
//! cargo run --example shared_primitives
//! DISTLOCK_URL=file:///tmp/distlock-demo cargo run --example shared_primitives
//! ```

use distlock::prelude::*;

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let backend = distlock::connect_with(&config).await?;
    let permit = backend.permit("render/slots", 4).await?; // one of 4 permits
    let reading = backend.read_lock("catalog").await?; // beside other readers
    println!("permit {} and read {}", permit.token(), reading.token());
    reading.release().await?;
    let writing = backend.write_lock("catalog").await?; // alone
    writing.release().await?;
    permit.release().await?;
    Ok(())
}
