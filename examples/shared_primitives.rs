//! A semaphore and a read-write lock. Runs in memory, no server needed:
//!
//! ```text
//! cargo run --example shared_primitives
//! ```
//!
//! The README's "Semaphores and read-write locks" section shows this program.

use distlock::prelude::*;

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let backend = distlock::connect("memory://").await?;
    let permit = backend.permit("render/slots", 4).await?; // one of 4 permits
    let reading = backend.read_lock("catalog").await?; // beside other readers
    println!("permit {} and read {}", permit.token(), reading.token());
    reading.release().await?;
    let writing = backend.write_lock("catalog").await?; // alone
    writing.release().await?;
    permit.release().await?;
    Ok(())
}
