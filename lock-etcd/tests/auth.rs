//! etcd with authentication enabled: a least-privilege user limited to the
//! key prefix, and auth tokens that expire while the backend is in use.

mod common;

use std::time::Duration;

use lock_core::{ErrorKind, LockBackendExt};
use lock_etcd::EtcdBackend;
use lock_testkit::servers::etcd::EtcdUser;
use lock_testkit::servers::{EtcdCluster, EtcdOptions};
use tokio::time::timeout;

const USER: &str = "locker";
const PASSWORD: &str = "locker-secret";
const SLACK: Duration = Duration::from_secs(3);

/// A one-member etcd with auth on and a user that may touch only
/// `<test prefix>/`.
async fn auth_cluster(options: EtcdOptions) -> EtcdCluster {
    let user = EtcdUser::new(USER, PASSWORD, format!("{}/", common::PREFIX));
    let options = options.auth("root-secret", vec![user]);
    match EtcdCluster::start_with(options).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start etcd with auth: {e}"),
    }
}

async fn locker(cluster: &EtcdCluster) -> EtcdBackend {
    let config = common::config_for(cluster.endpoints()).with_credentials(USER, PASSWORD);
    EtcdBackend::connect(config)
        .await
        .expect("a user granted the key prefix connects")
}

#[tokio::test]
async fn a_user_granted_only_the_key_prefix_connects_and_locks() {
    let cluster = auth_cluster(EtcdOptions::new(1)).await;
    let (a, b) = (locker(&cluster).await, locker(&cluster).await);

    let held = a.lock("least/privilege").await.expect("lock");
    let err = b
        .try_lock("least/privilege")
        .await
        .expect_err("already held");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    // A waiter watches its predecessor: that is inside the prefix too.
    let waiter = tokio::spawn(async move {
        b.lock_timeout("least/privilege", Duration::from_secs(5))
            .await
    });
    held.release().await.expect("release");
    let next = timeout(SLACK, waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .expect("the waiter acquires");
    next.release().await.expect("release");
}
