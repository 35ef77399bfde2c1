//! Requests with a deadline, retried on another endpoint when that is safe.
//!
//! `etcd-client` sets no request timeout and keeps sending to a dead
//! endpoint of its balanced channel: with one member of three down, about a
//! quarter of the requests fail. Every request here runs under the
//! configured request timeout, and requests whose repetition is harmless are
//! sent again (with a short backoff) when they fail with `Unavailable` or a
//! single attempt takes too long. A request refused because the auth token
//! expired gets a fresh token and is sent again (see [`crate::token`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::Site;
use distlock_core::{ErrorKind, Result};
use etcd_client::Client;
use tokio::time::{Instant, sleep, timeout_at};

use crate::errors::{EtcdSite, classify, site};
use crate::token::TokenRefresh;

/// First pause before a retry; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_millis(200);
/// A single attempt of a retried request gets at most this share of the
/// request timeout, so a hung member leaves time to ask another. The
/// balanced channel picks a member at random for each attempt and cannot
/// tell a frozen member from a live one, so it is the number of attempts
/// that bounds how often every one of them lands on a frozen member: with
/// one member of three frozen, a third, 10 % of the time in 30 measured
/// runs; a sixth leaves room for five or six attempts.
const ATTEMPT_SHARE: u32 = 6;

/// Whether a request may be sent again when its outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Repeating it is harmless (reads, compare-guarded writes designed for
    /// it, revokes, keepalives): retried on `Unavailable` and slow attempts.
    Idempotent,
    /// Sent once; an unknown outcome is reported as an error.
    Once,
}

/// An etcd client with the request timeout and retry policy applied.
#[derive(Clone)]
pub(crate) struct Rpc {
    client: Client,
    endpoints: Arc<str>,
    request_timeout: Duration,
    token: Arc<TokenRefresh>,
}

impl std::fmt::Debug for Rpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpc")
            .field("endpoints", &self.endpoints)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Rpc {
    /// `logs_in`: whether the client authenticates with a user name.
    pub(crate) fn new(
        client: Client,
        endpoints: String,
        request_timeout: Duration,
        logs_in: bool,
    ) -> Self {
        Rpc {
            client,
            endpoints: endpoints.into(),
            request_timeout,
            token: Arc::new(TokenRefresh::new(logs_in)),
        }
    }

    /// The underlying client (for streams, which manage their own timeouts).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn endpoints(&self) -> &str {
        &self.endpoints
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The site of request `op`, for error messages.
    pub(crate) fn context<'a>(&'a self, op: &'a str) -> Site<'a> {
        site(op, &self.endpoints)
    }

    /// Runs `request` (given a client and the attempt number, from 1) until
    /// it succeeds, fails for good, or the request timeout passes.
    pub(crate) async fn call<T, F, Fut>(&self, op: &str, retry: Retry, request: F) -> Result<T>
    where
        F: FnMut(Client, u32) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.call_by(op, retry, None, request).await
    }

    /// [`call`](Self::call), ending by `by` at the latest: several requests
    /// that together must fit in one request timeout share its deadline.
    pub(crate) async fn call_by<T, F, Fut>(
        &self,
        op: &str,
        retry: Retry,
        by: Option<Instant>,
        mut request: F,
    ) -> Result<T>
    where
        F: FnMut(Client, u32) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let ctx = self.context(op);
        let own = Instant::now() + self.request_timeout;
        let deadline = by.map_or(own, |by| by.min(own));
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        let mut token_refreshed = false;
        loop {
            attempt += 1;
            let token = self.token.generation();
            let now = Instant::now();
            let attempt_deadline = match retry {
                Retry::Idempotent => {
                    deadline.min(now + (self.request_timeout / ATTEMPT_SHARE).max(MAX_BACKOFF))
                }
                Retry::Once => deadline,
            };
            let outcome = timeout_at(attempt_deadline, request(self.client.clone(), attempt)).await;
            let retryable = match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(err)) if !token_refreshed && self.token.cures(&err) => {
                    // Refused, so not applied: even a `Once` request may go
                    // again, under the same attempt number.
                    token_refreshed = true;
                    tracing::debug!(op, error = %err, "etcd auth token refused; refreshing it");
                    match timeout_at(deadline, self.token.refresh(&self.client, token)).await {
                        Ok(Ok(())) => {
                            attempt -= 1;
                            continue;
                        }
                        Ok(Err(refresh)) => return Err(ctx.client_error(refresh)),
                        Err(_) => return Err(ctx.timed_out(self.request_timeout)),
                    }
                }
                Ok(Err(err)) => {
                    if retry == Retry::Once || classify(&err) != ErrorKind::Unavailable {
                        return Err(ctx.client_error(err));
                    }
                    tracing::debug!(op, attempt, error = %err, "etcd request failed; retrying");
                    Err(err)
                }
                Err(_) => {
                    if retry == Retry::Once {
                        return Err(ctx.timed_out(self.request_timeout));
                    }
                    tracing::debug!(op, attempt, "etcd request attempt timed out; retrying");
                    Ok(())
                }
            };
            if Instant::now() + backoff >= deadline {
                return Err(match retryable {
                    Err(err) => ctx.client_error(err),
                    Ok(()) => ctx.timed_out(self.request_timeout),
                });
            }
            sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}
