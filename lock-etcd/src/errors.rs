//! Precise mapping of `etcd-client` errors to [`ErrorKind`]s.
//!
//! A lock must not call everything "temporary": a lease that etcd no longer
//! knows is [`ErrorKind::LeaseLost`] (never retried), a refused or broken
//! connection and a cluster without a leader are [`ErrorKind::Unavailable`]
//! (retried on another endpoint), bad credentials are
//! [`ErrorKind::Unauthorized`].

use distlock_core::raw::Site;
use distlock_core::{Error, ErrorKind};
use etcd_client::Error as EtcdError;
use tonic::{Code, Status};

/// The kind of an `etcd-client` error.
pub(crate) fn classify(err: &EtcdError) -> ErrorKind {
    match err {
        EtcdError::GRpcStatus(status) => classify_status(status),
        EtcdError::TransportError(_) | EtcdError::IoError(_) | EtcdError::WatchError(_) => {
            ErrorKind::Unavailable
        }
        EtcdError::LeaseKeepAliveError(msg) if msg.contains("not found") => ErrorKind::LeaseLost,
        EtcdError::LeaseKeepAliveError(_) => ErrorKind::Unavailable,
        EtcdError::InvalidArgs(_)
        | EtcdError::InvalidUri(_)
        | EtcdError::EndpointError(_)
        | EtcdError::InvalidMetadataValue(_) => ErrorKind::InvalidConfig,
        _ => ErrorKind::Backend,
    }
}

fn classify_status(status: &Status) -> ErrorKind {
    let msg = status.message();
    if is_certificate_refused(msg) {
        return ErrorKind::InvalidConfig;
    }
    match status.code() {
        Code::Unavailable | Code::Cancelled | Code::ResourceExhausted | Code::Aborted => {
            ErrorKind::Unavailable
        }
        Code::DeadlineExceeded => ErrorKind::Timeout,
        Code::Unauthenticated | Code::PermissionDenied => ErrorKind::Unauthorized,
        Code::NotFound if msg.contains("lease not found") => ErrorKind::LeaseLost,
        Code::InvalidArgument | Code::FailedPrecondition
            if msg.contains("authentication")
                || msg.contains("auth token")
                || msg.contains("user name") =>
        {
            ErrorKind::Unauthorized
        }
        Code::Unknown | Code::Internal
            if msg.contains("transport")
                || msg.contains("connect")
                || msg.contains("h2 protocol")
                || msg.contains("broken pipe")
                || msg.contains("reset") =>
        {
            ErrorKind::Unavailable
        }
        _ => ErrorKind::Backend,
    }
}

/// Whether the server's certificate failed verification (unknown CA,
/// wrong name, expired): a configuration error, no retry can cure it.
fn is_certificate_refused(msg: &str) -> bool {
    msg.contains("invalid peer certificate")
}

/// Whether a TLS handshake ended because the server closed the connection,
/// as a server without TLS does when it receives a TLS hello.
pub(crate) fn is_tls_handshake_eof(err: &EtcdError) -> bool {
    err.to_string().contains("tls handshake eof")
}

/// Whether a compare-failed or missing lease reply means "lease gone".
pub(crate) fn is_lease_gone(err: &EtcdError) -> bool {
    classify(err) == ErrorKind::LeaseLost
}

/// An expired or unknown token (`invalid auth token`), or one older than
/// the auth store (`revision of auth store is old`).
pub(crate) fn is_stale_token(err: &EtcdError) -> bool {
    let EtcdError::GRpcStatus(status) = err else {
        return false;
    };
    let msg = status.message();
    match status.code() {
        Code::Unauthenticated => msg.contains("invalid auth token"),
        Code::InvalidArgument | Code::Unknown => {
            msg.contains("invalid auth token") || msg.contains("revision of auth store is old")
        }
        _ => false,
    }
}

/// The errors an etcd request makes, at a distlock-core [`Site`] (backend
/// `etcd`, the configured endpoints, the request).
pub(crate) trait EtcdSite {
    /// Maps a client error to a distlock error naming the request, the
    /// address, and what to do.
    fn client_error(&self, err: EtcdError) -> Error;
    /// A `Timeout` for a request that got no answer within `after`.
    fn timed_out(&self, after: std::time::Duration) -> Error;
}

impl EtcdSite for Site<'_> {
    fn client_error(&self, err: EtcdError) -> Error {
        let kind = classify(&err);
        let detail = detail(&err);
        self.error(kind, format_args!("{detail}{}", advice(kind)))
            .with_source(err)
    }

    fn timed_out(&self, after: std::time::Duration) -> Error {
        self.error(
            ErrorKind::Timeout,
            format_args!(
                "no answer within the request timeout of {}; is etcd overloaded or \
                 partitioned? (raise request_timeout if the cluster is just slow)",
                distlock_core::raw::human_duration(after)
            ),
        )
    }
}

/// The site of request `operation` on `endpoints`.
pub(crate) fn site<'a>(operation: &'a str, endpoints: &'a str) -> Site<'a> {
    Site::new("etcd", endpoints, operation)
}

/// The error's own words: a gRPC status's message and code.
pub(crate) fn detail(err: &EtcdError) -> String {
    match err {
        EtcdError::GRpcStatus(status) => {
            format!("{} ({:?})", status.message(), status.code())
        }
        other => other.to_string(),
    }
}

fn advice(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Unavailable => "; is etcd running there and does it have quorum?",
        ErrorKind::Unauthorized => {
            "; check the username and password, and that the user's role may read and write the \
             key prefix"
        }
        ErrorKind::LeaseLost => {
            "; the lease expired or was revoked, so the lock is gone: acquire it again (with a new \
             fencing token)"
        }
        ErrorKind::InvalidConfig => "; check the endpoints and TLS settings",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_precise_kinds() {
        let cases = [
            (
                Status::unavailable("etcdserver: no leader"),
                ErrorKind::Unavailable,
            ),
            (
                Status::not_found("etcdserver: requested lease not found"),
                ErrorKind::LeaseLost,
            ),
            (
                Status::invalid_argument(
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                ErrorKind::Unauthorized,
            ),
            (
                Status::permission_denied("etcdserver: permission denied"),
                ErrorKind::Unauthorized,
            ),
            (Status::deadline_exceeded("slow"), ErrorKind::Timeout),
            (
                Status::unavailable("invalid peer certificate: UnknownIssuer"),
                ErrorKind::InvalidConfig,
            ),
            (
                Status::invalid_argument("etcdserver: key is not provided"),
                ErrorKind::Backend,
            ),
        ];
        for (status, kind) in cases {
            assert_eq!(
                classify(&EtcdError::GRpcStatus(status.clone())),
                kind,
                "{status:?}"
            );
        }
        assert!(is_lease_gone(&EtcdError::LeaseKeepAliveError(
            "lease not found".into()
        )));
    }

    #[test]
    fn messages_name_the_request_and_address() {
        let ctx = site("acquire lock \"jobs/x\"", "127.0.0.1:1");
        let err = ctx.client_error(EtcdError::GRpcStatus(Status::unavailable(
            "connection refused",
        )));
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        let text = err.to_string();
        assert!(
            text.contains("127.0.0.1:1") && text.contains("jobs/x"),
            "{text}"
        );
    }

    #[test]
    fn only_expired_or_outdated_tokens_are_stale() {
        let cases = [
            (
                Status::unauthenticated("etcdserver: invalid auth token"),
                true,
            ),
            (
                Status::invalid_argument("etcdserver: revision of auth store is old"),
                true,
            ),
            (
                Status::invalid_argument(
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                false,
            ),
            (
                Status::permission_denied("etcdserver: permission denied"),
                false,
            ),
        ];
        for (status, stale) in cases {
            let err = EtcdError::GRpcStatus(status.clone());
            assert_eq!(is_stale_token(&err), stale, "{status:?}");
        }
    }
}
