//! Mapping redis-rs errors to distlock error kinds, precisely.
//!
//! A refused or dropped connection is `Unavailable` (retryable), a command
//! that got no reply in time is `Timeout`, bad credentials or a missing ACL
//! permission are `Unauthorized`. A lock that is gone is decided by our
//! scripts' replies, never by a client error, so no client error maps to
//! `LeaseLost`. Every message names the backend, the server address and what
//! was being done, and says what to try.

use std::time::Duration;

use distlock_core::raw::{Site, human_duration};
use distlock_core::{Error, ErrorKind};
use redis::{RedisError, ServerErrorKind};

/// The errors a Redis client call makes, at a distlock-core [`Site`]
/// (backend name, server address, operation).
pub(crate) trait RedisSite {
    /// Maps a client error.
    fn client_error(&self, err: RedisError) -> Error;
    /// A command that got no reply within `after`.
    fn timed_out(&self, after: Duration) -> Error;
    /// A connection that could not be set up within `after`.
    fn unreachable(&self, after: Duration) -> Error;
    /// Servers that could not be reached, for the reason `why`.
    fn unreachable_because(&self, why: &str) -> Error;
}

impl RedisSite for Site<'_> {
    fn client_error(&self, err: RedisError) -> Error {
        let kind = kind_of(&err);
        let advice = match kind {
            ErrorKind::Unauthorized => {
                "check the user name and password (URL userinfo) and the user's ACL permissions"
            }
            ErrorKind::Unavailable => "is redis-server running and reachable?",
            ErrorKind::Timeout => "the server did not answer within request_timeout",
            ErrorKind::InvalidName => {
                "on a Redis Cluster a lock name must not start with '}': its keys' {name} hash tag would be empty, so they would hash to different slots"
            }
            _ => "see the source error",
        };
        Site::error(self, kind, format_args!("failed: {err}; {advice}")).with_source(err)
    }

    fn timed_out(&self, after: Duration) -> Error {
        Site::error(
            self,
            ErrorKind::Timeout,
            format_args!(
                "no reply within {} (request_timeout); is the server overloaded or the \
                 network partitioned?",
                human_duration(after)
            ),
        )
    }

    fn unreachable(&self, after: Duration) -> Error {
        Site::error(
            self,
            ErrorKind::Unavailable,
            format_args!(
                "unreachable: not done within {} (connect_timeout); is redis-server \
                 running and reachable?",
                human_duration(after)
            ),
        )
    }

    fn unreachable_because(&self, why: &str) -> Error {
        Site::error(
            self,
            ErrorKind::Unavailable,
            format_args!("unreachable: {why}; is redis-server running and reachable?"),
        )
    }
}

/// The distlock kind of a redis-rs error.
pub(crate) fn kind_of(err: &RedisError) -> ErrorKind {
    let code = err.code().unwrap_or("");
    if matches!(err.kind(), redis::ErrorKind::AuthenticationFailed)
        || matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM")
    {
        return ErrorKind::Unauthorized;
    }
    if err.is_timeout() {
        return ErrorKind::Timeout;
    }
    if err.is_connection_refusal() || err.is_io_error() || err.is_connection_dropped() {
        return ErrorKind::Unavailable;
    }
    match err.kind() {
        redis::ErrorKind::Server(kind) => match kind {
            ServerErrorKind::NoPerm => ErrorKind::Unauthorized,
            // Every key of a lock shares its `{name}` hash tag, and the
            // prefix may hold no braces, so only a name that empties the
            // tag (one starting with `}`) spreads them over slots.
            ServerErrorKind::CrossSlot => ErrorKind::InvalidName,
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask => ErrorKind::Unavailable,
            _ => ErrorKind::Backend,
        },
        redis::ErrorKind::InvalidClientConfig => ErrorKind::InvalidConfig,
        _ => ErrorKind::Backend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_connection_is_unavailable_and_auth_is_unauthorized() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(kind_of(&refused), ErrorKind::Unavailable);
        let auth = RedisError::from((redis::ErrorKind::AuthenticationFailed, "bad"));
        assert_eq!(kind_of(&auth), ErrorKind::Unauthorized);
        let site = Site::new("redis", "127.0.0.1:1", "connect");
        let e = site.client_error(refused);
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
        assert_eq!(e.site().unwrap().operation, "connect");
        assert!(e.is_retryable());
    }
}
