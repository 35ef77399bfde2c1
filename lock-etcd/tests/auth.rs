//! etcd with authentication enabled: a least-privilege user limited to the
//! key prefix, and auth tokens that expire while the backend is in use.

mod support;

use distlock_etcd::ClientConfig;
use std::time::Duration;

use distlock_core::{ErrorKind, LockBackendExt};
use distlock_etcd::EtcdBackend;
use distlock_testkit::assert::{acquired_and_released, fails_with, joined};
use distlock_testkit::servers::etcd::EtcdUser;
use distlock_testkit::servers::{EtcdCluster, EtcdOptions};

const USER: &str = "locker";
const PASSWORD: &str = "locker-secret";
const SLACK: Duration = Duration::from_secs(3);

/// A one-member etcd with auth on and a user that may touch only
/// `<test prefix>/`.
async fn auth_cluster(options: EtcdOptions) -> EtcdCluster {
    let user = EtcdUser::new(USER, PASSWORD, format!("{}/", support::PREFIX));
    let options = options.auth("root-secret", vec![user]);
    match EtcdCluster::start_with(options).await {
        Ok(cluster) => cluster,
        Err(e) => panic!("could not start etcd with auth: {e}"),
    }
}

async fn locker(cluster: &EtcdCluster) -> EtcdBackend {
    let config = support::config_for(cluster.endpoints()).with_credentials(USER, PASSWORD);
    EtcdBackend::connect(config)
        .await
        .expect("a user granted the key prefix connects")
}

#[tokio::test]
async fn a_user_granted_only_the_key_prefix_connects_and_locks() {
    let cluster = auth_cluster(EtcdOptions::new(1)).await;
    let (a, b) = (locker(&cluster).await, locker(&cluster).await);

    let held = a.lock("least/privilege").await.expect("lock");
    fails_with(
        ErrorKind::WouldBlock,
        "already held",
        b.try_lock("least/privilege").await,
    );
    // A waiter watches its predecessor: that is inside the prefix too.
    let waiter = tokio::spawn(async move {
        b.lock_timeout("least/privilege", Duration::from_secs(5))
            .await
    });
    held.release().await.expect("release");
    let next = joined(SLACK, "the waiter is woken", waiter)
        .await
        .expect("the waiter acquires");
    next.release().await.expect("release");
}

/// The same user under a prefix outside its role's key range is refused,
/// as `Unauthorized`: an operator can keep each application to its prefix.
#[tokio::test]
async fn a_user_granted_only_the_key_prefix_is_refused_outside_it() {
    let cluster = auth_cluster(EtcdOptions::new(1)).await;
    let config = support::config_for(cluster.endpoints())
        .with_credentials(USER, PASSWORD)
        .with_prefix("/someone-else");
    let refused = match EtcdBackend::connect(config).await {
        Err(e) => e,
        Ok(backend) => backend
            .lock("least/privilege")
            .await
            .expect_err("a lock outside the user's key range must be refused"),
    };
    assert_eq!(refused.kind(), ErrorKind::Unauthorized, "{refused}");
    assert!(!refused.to_string().contains(PASSWORD), "{refused}");
}

/// Simple-token TTL of the expiry test.
const TOKEN_TTL: Duration = Duration::from_secs(2);
/// etcd drops a token unused for its TTL, checking once a second.
const TOKEN_GONE_AFTER: Duration = Duration::from_millis(3500);

#[tokio::test]
async fn expired_auth_tokens_are_refreshed_so_held_locks_release_and_waiters_acquire() {
    let cluster = auth_cluster(EtcdOptions::new(1).auth_token_ttl(TOKEN_TTL)).await;
    let (a, b) = (locker(&cluster).await, locker(&cluster).await);
    let held = a.lock("token/expiry").await.expect("lock");
    // b waits once, so its shared watch stream carries its first token.
    let err = b
        .lock_timeout("token/expiry", Duration::from_millis(300))
        .await
        .expect_err("held by a");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");

    // Leave every token unused until etcd drops it. A client that
    // authenticated now shows when that has happened.
    let probe_options = etcd_client::ConnectOptions::new().with_user(USER, PASSWORD);
    let mut probe = etcd_client::Client::connect(cluster.endpoints(), Some(probe_options))
        .await
        .expect("probe client");
    tokio::time::sleep(TOKEN_GONE_AFTER).await;
    let expired = probe
        .get(format!("{}/probe", support::PREFIX), None)
        .await
        .expect_err("etcd must have dropped the idle token by now");
    assert!(
        expired.to_string().contains("invalid auth token"),
        "{expired}"
    );

    // A new acquire after expiry, and a waiter whose watch stream's token is gone.
    let before = support::txns_started(&cluster).await;
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock_timeout("token/expiry", Duration::from_secs(10))
            .await;
        (b, guard)
    });
    // Observe the waiter for a while: it must wait on its watch, not spin.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during_wait = support::txns_started(&cluster).await - before;
    assert!(
        during_wait < 20.0,
        "the waiter sent {during_wait} Txns in 1 s: its watch does not work"
    );
    // A lock held across the expiry can be released.
    held.release()
        .await
        .expect("a lock held across token expiry releases");
    let (b, next) = joined(SLACK, "the waiter is woken by the release", waiter).await;
    let next = next.expect("the waiter acquires after token expiry");
    next.release().await.expect("release");
    drop(b);
    acquired_and_released("a new acquire after expiry", a.lock("token/fresh")).await;
}
