//! Mapping `zookeeper-client` errors to distlock errors a caller can act on.
//!
//! Every message names what we were doing (the lock or election), the
//! backend and the server addresses, and says what to do.

use distlock_core::raw::Site;
use distlock_core::{Error, ErrorKind};
use zookeeper_client as zk;

/// The errors a ZooKeeper client call makes, at a distlock-core [`Site`]
/// (backend `zk`, the connect string, the operation).
pub(crate) trait ZkSite {
    /// Converts a client error into a distlock error.
    fn client_error(&self, e: zk::Error) -> Error;
}

impl ZkSite for Site<'_> {
    fn client_error(&self, e: zk::Error) -> Error {
        let (kind, advice) = classify(&e);
        self.error(kind, format_args!("{e}; {advice}"))
            .with_source(e)
    }
}

/// The site of an operation on the servers of `connect_string`.
pub(crate) fn doing<'a>(operation: &'a str, connect_string: &'a str) -> Site<'a> {
    Site::new(BACKEND, connect_string, operation)
}

/// The backend's name in messages and [`distlock_core::ErrorSite`]s.
pub(crate) const BACKEND: &str = "zk";

/// Whether an operation may or may not have happened: the request was sent
/// but the reply was lost (connection loss, our request timeout, or an I/O
/// error on the connection, which the client reports as a custom error).
pub(crate) fn in_doubt(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_)
    )
}

/// Whether the session is over: nothing on it can succeed again.
pub(crate) fn session_over(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed
    )
}

fn classify(e: &zk::Error) -> (ErrorKind, &'static str) {
    use zk::Error as Z;
    match e {
        Z::SessionExpired | Z::SessionMoved => (
            ErrorKind::LeaseLost,
            "the session expired, so every lock and queue entry of this client is gone; \
             acquire again (a new session is opened)",
        ),
        Z::ClientClosed => (
            ErrorKind::LeaseLost,
            "the session was closed, so every lock of this client is gone; acquire again",
        ),
        Z::ConnectionLoss | Z::NoHosts | Z::Custom(_) => (
            ErrorKind::Unavailable,
            "the connection was lost; is the ensemble running and reachable?",
        ),
        Z::Timeout => (
            ErrorKind::Timeout,
            "no reply within the request timeout; the server may be overloaded or unreachable",
        ),
        Z::NoAuth | Z::AuthFailed => (
            ErrorKind::Unauthorized,
            "permission denied; check the username and password, and the ACLs of the lock root",
        ),
        Z::InvalidAcl | Z::NoChildrenForEphemerals => (
            ErrorKind::InvalidConfig,
            "the lock root cannot hold lock nodes; choose another path",
        ),
        Z::BadArguments(_) => (
            ErrorKind::InvalidConfig,
            "the server refused the request's path or ACL; check the lock root and the name",
        ),
        Z::Throttled => (
            ErrorKind::Unavailable,
            "the server throttled the request; retry later",
        ),
        Z::NotReadOnly => (
            ErrorKind::Unavailable,
            "the server is read-only (it lost its quorum); retry later",
        ),
        _ => (ErrorKind::Backend, "unexpected ZooKeeper error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_expiry_is_lease_lost_and_not_retryable() {
        let doing = crate::errors::doing("acquiring lock a", "127.0.0.1:2181");
        let err = doing.client_error(zk::Error::SessionExpired);
        assert_eq!(err.kind(), ErrorKind::LeaseLost);
        assert!(!err.is_retryable());
        assert!(err.message().contains("lock a") && err.message().contains("127.0.0.1:2181"));
        assert_eq!(
            doing.client_error(zk::Error::ConnectionLoss).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            doing.client_error(zk::Error::NoAuth).kind(),
            ErrorKind::Unauthorized
        );
        assert_eq!(
            doing.client_error(zk::Error::NodeExists).kind(),
            ErrorKind::Backend
        );
        assert!(in_doubt(&zk::Error::ConnectionLoss) && !in_doubt(&zk::Error::NoNode));
    }
}
