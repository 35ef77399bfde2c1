//! A write that commits only while the lock is held.
//!
//! The lock's lease can run out between "I hold the lock" and "my write
//! reached etcd" (a GC pause, a slow network). Putting `is_owner_of(&guard)`
//! in the write's Txn makes etcd itself refuse the write once the lock is
//! gone or belongs to a newer holder.
//!
//! Runs against `DISTLOCK_URL` (e.g. `etcd://127.0.0.1:2379/examples`) if
//! set, otherwise starts a throwaway etcd with the test kit:
//!
//! ```text
//! cargo run -p distlock-etcd --example etcd_guarded_write
//! DISTLOCK_URL=etcd://127.0.0.1:2379/examples cargo run -p distlock-etcd --example etcd_guarded_write
//! ```

use std::time::Duration;

use distlock_core::LockBackendExt;
use distlock_etcd::etcd_client::{Txn, TxnOp};
use distlock_etcd::{EtcdBackend, is_owner_of, lease_of_key};
use distlock_testkit::servers::EtcdCluster;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_server, url) = match std::env::var("DISTLOCK_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = EtcdCluster::start(1).await?;
            let url = format!(
                "etcd://{}/examples/guarded-write",
                server.endpoints().join(",")
            );
            (Some(server), url)
        }
    };
    let backend = EtcdBackend::connect_url(&url).await?;
    let mut client = backend.client();

    let guard = backend.lock("reports/nightly").await?;
    println!("holding {} with token {}", guard.key(), guard.token());
    let write = |attempt: &str| {
        Txn::new().when([is_owner_of(&guard)]).and_then([TxnOp::put(
            "/examples/data/nightly-report",
            format!("{attempt}, token {}", guard.token()),
            None,
        )])
    };

    let committed = client
        .txn(write("written while holding"))
        .await?
        .succeeded();
    println!("write while holding the lock: committed = {committed}");
    assert!(committed);

    // Lose the lock the way a crashed or partitioned holder would: its
    // lease ends on the server (here, revoked from outside).
    let lease = lease_of_key(guard.key()).ok_or("no lease id in the key")?;
    client.lease_revoke(lease).await?;
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await?;
    println!("lock lost: {reason}");

    let committed = client
        .txn(write("written after losing it"))
        .await?
        .succeeded();
    println!("write after the lock was lost: committed = {committed}");
    assert!(
        !committed,
        "etcd must refuse a write from a holder that lost the lock"
    );

    let value = client.get("/examples/data/nightly-report", None).await?;
    let stored = value
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
    println!("stored value: {stored:?}");
    Ok(())
}
