//! Leader election through the facade, as an application writes it: one
//! import, names as strings, and a leader stream read with its own `next`.
//!
//! ```text
//! cargo run --example leader_election
//! DISTLOCK_URL=etcd://127.0.0.1:2379 cargo run --example leader_election --features etcd
//! ```
//!
//! The README's "Leader election" section shows this program.

use distlock::prelude::*;

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let url = std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "memory://".to_owned());
    let backend = distlock::connect(&url).await?;

    // Follow the leaders: the current one, then every change, in order.
    let mut leaders = backend.follow("jobs/leader").await?;

    // Wait to be elected, publishing who we are.
    let leadership = backend.elect("jobs/leader", "node-1").await?;
    println!("elected with token {}", leadership.token());

    let current = backend.leader_of("jobs/leader").await?;
    println!("leader: {:?}", current.map(|l| l.value_lossy()));
    if let Some(seen) = leaders.next().await {
        println!("observer saw {}", seen?.value_lossy());
    }

    // Lead until done (or until `leadership.lost()` fires), then hand over.
    leadership.resign().await?;
    Ok(())
}
