//! The rule that files a trial under etcd's known lease bug judges how a
//! hold's lease ended, not merely that it is gone: a lease its own client
//! revoked is the client's doing, however the trial ended, and only a
//! lease that ended at no request of its client is blamed on the server.

use std::time::Duration;

use distlock_etcd::etcd_client::{Client, PutOptions};
use distlock_testkit::servers::EtcdCluster;
use fault_matrix::cell::Hold;
use fault_matrix::protocol::End;
use fault_matrix::revocation::Revocation;
use fault_matrix::row::Service;

/// etcd's shortest lease: it expires well within the test's patience.
const SHORT_TTL: i64 = 2;
/// Bound for the lease to expire and etcd to count it.
const EXPIRY_WAIT: Duration = Duration::from_secs(20);

/// A key `prefix/<lease in hex>` (as etcd's backend names them) under a
/// fresh lease of `ttl` seconds: the lease, the key, and the key's create
/// revision (the hold's token, as etcd's backend grants it).
async fn key_under_lease(client: &mut Client, prefix: &str, ttl: i64) -> (i64, String, u64) {
    let lease = client
        .lease_grant(ttl, None)
        .await
        .expect("grant a lease")
        .id();
    let key = format!("{prefix}/{lease:x}");
    let put = client
        .put(
            key.as_str(),
            "held",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put the key");
    let revision = put.header().expect("a header").revision();
    (
        lease,
        key,
        u64::try_from(revision).expect("a positive revision"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_its_client_revoked_is_not_filed_as_the_servers_bug() {
    let cluster = match EtcdCluster::start(3).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start a 3-member etcd: {e}"),
    };
    let leader = cluster.leader_index().await.expect("a leader");
    // The leader is the member that expires leases: the one "frozen".
    let revocation = Revocation::before_freeze(&cluster, leader).await;
    let mut client = Client::connect(cluster.endpoints(), None)
        .await
        .expect("connect");

    // Client 1 revokes its own lease, and says so at its revision.
    let (own_lease, own_key, own_token) = key_under_lease(&mut client, "t/own", 60).await;
    let revoked = client.lease_revoke(own_lease).await.expect("revoke");
    let own_end = End {
        client: 1,
        key: None,
        lease: Some(own_lease),
        revision: Some(revoked.header().expect("a header").revision()),
    };
    // Client 2's lease expires, at nobody's request.
    let (_, expired_key, expired_token) =
        key_under_lease(&mut client, "t/expired", SHORT_TTL).await;
    let deadline = tokio::time::Instant::now() + EXPIRY_WAIT;
    while client
        .get(expired_key.as_str(), None)
        .await
        .expect("get")
        .count()
        > 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the short lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Client 3 revoked its lease too, but its end event says a revision
    // other than the one that deleted its key: not its doing.
    let (other_lease, other_key, other_token) = key_under_lease(&mut client, "t/other", 60).await;
    let other_revoked = client.lease_revoke(other_lease).await.expect("revoke");
    let other_end = End {
        client: 3,
        key: None,
        lease: Some(other_lease),
        revision: Some(other_revoked.header().expect("a header").revision() + 1000),
    };

    let holds = [
        (
            Hold {
                client: 1,
                token: own_token,
            },
            own_key,
        ),
        (
            Hold {
                client: 2,
                token: expired_token,
            },
            expired_key,
        ),
        (
            Hold {
                client: 3,
                token: other_token,
            },
            other_key,
        ),
    ];
    let service = Service::Etcd(cluster);
    let (blamed, note) = revocation
        .ended_early(&service, &holds, &[own_end, other_end])
        .await;
    let blamed: Vec<u32> = blamed.iter().map(|h| h.client).collect();
    assert_eq!(blamed, [2, 3], "{note}");
    assert!(
        note.contains("client 1") && note.contains("its own revocation"),
        "{note}"
    );
}
