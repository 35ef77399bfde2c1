//! Keeping the auth token fresh.
//!
//! etcd drops a simple token that went unused for `--auth-token-ttl` (300 s
//! by default), and refuses a token issued before a later change to its
//! users or roles. A lock held quietly for longer (keepalives carry no
//! token) would otherwise fail its release, and every later request, with
//! `Unauthorized`. A request refused for either reason was not applied, so
//! it re-authenticates and is sent again, once.

use std::sync::atomic::{AtomicU64, Ordering};

use etcd_client::Client;

/// Re-authenticates a client, once for a burst of refused requests.
#[derive(Debug, Default)]
pub(crate) struct TokenRefresh {
    /// Whether the client logs in at all (no token to refresh otherwise).
    enabled: bool,
    /// Counts the refreshes: a request that was refused with the token of
    /// generation `n` refreshes only if nobody did since.
    generation: AtomicU64,
    refreshing: tokio::sync::Mutex<()>,
}

impl TokenRefresh {
    pub(crate) fn new(enabled: bool) -> Self {
        TokenRefresh {
            enabled,
            ..TokenRefresh::default()
        }
    }

    /// The generation of the token requests are sent with now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether `err` is a refusal that a fresh token cures.
    pub(crate) fn cures(&self, err: &etcd_client::Error) -> bool {
        self.enabled && crate::errors::is_stale_token(err)
    }

    /// Gets a new token, unless one newer than generation `seen` exists.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the client keeps its old token until a new one arrived.
    pub(crate) async fn refresh(
        &self,
        client: &Client,
        seen: u64,
    ) -> Result<(), etcd_client::Error> {
        let _one_at_a_time = self.refreshing.lock().await;
        if self.generation() != seen {
            return Ok(());
        }
        client.refresh_token().await?;
        self.generation.fetch_add(1, Ordering::AcqRel);
        tracing::debug!("etcd auth token refreshed");
        Ok(())
    }
}
