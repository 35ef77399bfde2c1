//! Properties of fencing tokens.

use std::time::Duration;

use distlock_core::LockBackendExt;

use super::Target;

/// Tokens strictly increase across 50 successive holders on two clients.
pub async fn tokens_increase_across_successive_holders(target: &dyn Target) {
    let clients = [target.client().await, target.client().await];
    let mut last = None;
    for i in 0..50 {
        let guard = clients[i % 2]
            .lock_timeout("conformance/tokens", Duration::from_secs(10))
            .await
            .expect("lock");
        let token = guard.token();
        if let Some(last) = last {
            assert!(token > last, "holder {i}: token {token} not above {last}");
        }
        last = Some(token);
        guard.release().await.expect("release");
    }
}

/// A holder that stops renewing is taken over after its TTL by a holder with a
/// greater token.
pub async fn tokens_increase_after_expiry_takeover(target: &dyn Target) {
    let (a, b) = super::two_clients(target).await;
    let first = a.lock("conformance/takeover-token").await.expect("lock");
    let first_token = first.token();
    let second = super::take_over_after_crash(target, first, &*b).await;
    assert!(
        second.token() > first_token,
        "takeover token {} not above expired holder's {first_token}",
        second.token()
    );
    second.release().await.expect("release");
}
