//! Mapping redis-rs errors to distlock error kinds, precisely.
//!
//! A refused or dropped connection is `Unavailable` (retryable), a command
//! that got no reply in time is `Timeout`, bad credentials or a missing ACL
//! permission are `Unauthorized`. A lock that is gone is decided by our
//! scripts' replies, never by a client error, so no client error maps to
//! `LeaseLost`. Every message names the backend, the server address and what
//! was being done, and says what to try.

use std::time::Duration;

use lock_core::{Error, ErrorKind};
use redis::{RedisError, ServerErrorKind};

/// Where an error happened: backend name, server address, operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) backend: &'static str,
    pub(crate) addr: &'a str,
    pub(crate) what: &'a str,
}

impl Site<'_> {
    /// Maps a client error.
    pub(crate) fn error(&self, err: RedisError) -> Error {
        let kind = kind_of(&err);
        let advice = match kind {
            ErrorKind::Unauthorized => {
                "check the user name and password (URL userinfo) and the user's ACL permissions"
            }
            ErrorKind::Unavailable => "is redis-server running and reachable?",
            ErrorKind::Timeout => "the server did not answer within request_timeout",
            _ => "see the source error",
        };
        Error::new(
            kind,
            format!(
                "{} at {}: {} failed: {err}; {advice}",
                self.backend, self.addr, self.what
            ),
        )
        .with_source(err)
    }

    /// A command that got no reply within `after`.
    pub(crate) fn timed_out(&self, after: Duration) -> Error {
        Error::timeout(format!(
            "{} at {}: {} got no reply within {after:?} (request_timeout); is the server overloaded or the network partitioned?",
            self.backend, self.addr, self.what
        ))
    }

    /// A connection that could not be set up within `after`.
    pub(crate) fn unreachable(&self, after: Duration) -> Error {
        Error::unavailable(format!(
            "{} at {} unreachable: {} did not finish within {after:?} (connect_timeout); is redis-server running and reachable?",
            self.backend, self.addr, self.what
        ))
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
        let site = Site {
            backend: "redis",
            addr: "127.0.0.1:1",
            what: "connecting",
        };
        let e = site.error(refused);
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
        assert!(e.is_retryable());
    }
}
