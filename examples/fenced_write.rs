//! Fencing: a storage service that rejects stale tokens stops a former
//! holder that was paused past its lease, even though it still "thinks" it
//! holds the lock.
//!
//! ```text
//! cargo run --example fenced_write
//! ```
//!
//! Client A takes the lock, then stalls (a GC pause, a swapped-out process).
//! Its lease expires, B takes over with a larger token and writes. When A
//! wakes and writes with its old token, the storage refuses. The lease alone
//! could not have prevented A's write; the token does.

use std::sync::Mutex;
use std::time::Duration;

use distlock::memory::MemoryBackend;
use distlock::{FencingToken, LockBackendExt};

/// A resource that remembers the highest token it has seen.
#[derive(Default)]
struct Storage {
    highest: Mutex<Option<FencingToken>>,
    value: Mutex<String>,
}

impl Storage {
    fn write(&self, token: FencingToken, value: &str) -> Result<(), String> {
        let mut highest = self.highest.lock().unwrap();
        if highest.is_some_and(|h| token < h) {
            return Err(format!(
                "rejected write with stale token {token} (seen {})",
                highest.unwrap()
            ));
        }
        *highest = Some(token);
        *self.value.lock().unwrap() = value.to_owned();
        Ok(())
    }
}

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let server = MemoryBackend::new().with_default_ttl(Duration::from_millis(300))?;
    let (client_a, client_b) = (server.clone(), server.clone());
    let storage = Storage::default();

    let a = client_a.lock("fenced/file").await?;
    println!("A holds the lock with token {}", a.token());
    storage
        .write(a.token(), "written by A")
        .expect("first write");

    // A stalls. Simulate the pause by ending its lease the way the server
    // would when the TTL runs out without renewal.
    server.expire_now(a.name());
    println!("A is paused; its lease expires");

    let b = client_b.lock("fenced/file").await?;
    println!("B takes over with token {}", b.token());
    storage.write(b.token(), "written by B").expect("B's write");

    // A wakes up and, without checking, writes with its old token.
    match storage.write(a.token(), "late write by A") {
        Ok(()) => panic!("the stale write went through"),
        Err(why) => println!("storage: {why}"),
    }
    println!("A's guard knows too: is_held = {}", a.is_held());
    println!("final value: {}", storage.value.lock().unwrap());
    b.release().await?;
    Ok(())
}
