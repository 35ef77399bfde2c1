//! One error type for every backend, with a [`ErrorKind`] that callers can act on.
//!
//! Backends map their client errors precisely: a lost lease or an expired
//! session is [`ErrorKind::LeaseLost`] (never retryable), a refused connection
//! is [`ErrorKind::Unavailable`] (retryable), and so on. Mapping everything to
//! "temporary" would make callers retry operations whose lock is already gone.

use std::fmt;

/// A boxed error from a backend client, kept as the `source` of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with the distlock [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in terms a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The lock or election name is empty, too long, or holds NUL or control characters.
    InvalidName,
    /// A configuration value is invalid: a malformed URL, an unknown scheme, a zero TTL, ...
    InvalidConfig,
    /// The operation did not finish within its wait or request timeout.
    Timeout,
    /// `try_lock` found the lock held by someone else.
    WouldBlock,
    /// Our lease, session or key is gone: the lock is no longer ours.
    LeaseLost,
    /// The operation needs a lock or leadership that we do not hold.
    NotHeld,
    /// The server could not be reached or has no quorum.
    Unavailable,
    /// The server rejected our credentials or permissions.
    Unauthorized,
    /// The backend cannot do this, or the feature for it was not compiled in.
    Unsupported,
    /// Any other error reported by the backend or its client.
    Backend,
}

impl ErrorKind {
    /// A short lowercase name, used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidName => "invalid name",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::Timeout => "timeout",
            ErrorKind::WouldBlock => "would block",
            ErrorKind::LeaseLost => "lease lost",
            ErrorKind::NotHeld => "not held",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Backend => "backend error",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every distlock operation.
///
/// It carries a [`ErrorKind`], a message that names what was wrong (the lock,
/// the backend, the address) and, where there is one, the client error as its
/// [`source`](std::error::Error::source).
///
/// `Debug` reads like `Display`, followed by the chain of causes, as
/// `anyhow` and `io::Error` do: Rust prints `Debug` for an error returned
/// from `main`, and a user should see a sentence there, not a struct dump.
/// `{:#?}` still shows every field.
#[derive(thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    site: Option<ErrorSite>,
    #[source]
    source: Option<BoxError>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct("Error")
                .field("kind", &self.kind)
                .field("message", &self.message)
                .field("site", &self.site)
                .field("source", &self.source)
                .finish();
        }
        write!(f, "{self}")?;
        let mut causes = Vec::new();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            let text = cause.to_string();
            // A message that already quotes its cause need not repeat it.
            if !text.is_empty() && !self.message.contains(&text) {
                causes.push(text);
            }
            next = cause.source();
        }
        match causes.as_slice() {
            [] => Ok(()),
            [one] => write!(f, "\n\nCaused by:\n    {one}"),
            many => {
                f.write_str("\n\nCaused by:")?;
                for (i, cause) in many.iter().enumerate() {
                    write!(f, "\n    {i}: {cause}")?;
                }
                Ok(())
            }
        }
    }
}

/// Where an error happened, as fields a program can log or match on: the
/// backend (`etcd`, `redis`, `redlock`, `zk`, `postgres`, `file`, `memory`) and the
/// operation (`acquire lock "jobs/x"`, `connect`, ...). The message says
/// the same in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorSite {
    /// The backend, as its URL scheme names it.
    pub backend: &'static str,
    /// What was being done.
    pub operation: String,
}

impl Error {
    /// A new error of `kind` with a message saying what was wrong.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            site: None,
            source: None,
        }
    }

    /// Records where the error happened (see [`ErrorSite`]).
    pub fn with_site(mut self, backend: &'static str, operation: impl Into<String>) -> Self {
        self.site = Some(ErrorSite {
            backend,
            operation: operation.into(),
        });
        self
    }

    /// Where the error happened, when the backend said.
    pub fn site(&self) -> Option<&ErrorSite> {
        self.site.as_ref()
    }

    /// Attaches the underlying client error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same error as another kind, message, site and source kept: for
    /// distlock-core to hold every backend to one kind where the contract names
    /// it.
    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the same call may succeed if tried again later.
    ///
    /// `Timeout`, `WouldBlock` and `Unavailable` are retryable. `LeaseLost` is
    /// not: the lock it was about is gone, and only a new acquisition (with a
    /// new fencing token) can take it again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Timeout | ErrorKind::WouldBlock | ErrorKind::Unavailable
        )
    }

    /// `InvalidName` with a message.
    pub fn invalid_name(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidName, message)
    }

    /// `InvalidConfig` with a message.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidConfig, message)
    }

    /// `Timeout` with a message.
    pub fn timeout(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Timeout, message)
    }

    /// `WouldBlock` with a message.
    pub fn would_block(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::WouldBlock, message)
    }

    /// `LeaseLost` with a message.
    pub fn lease_lost(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::LeaseLost, message)
    }

    /// `NotHeld` with a message.
    pub fn not_held(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::NotHeld, message)
    }

    /// `Unavailable` with a message.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    /// `Unauthorized` with a message.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unauthorized, message)
    }

    /// `Unsupported` with a message.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unsupported, message)
    }

    /// `Backend` with a message.
    pub fn backend(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Backend, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_lost_is_not_retryable() {
        assert!(!Error::lease_lost("gone").is_retryable());
        assert!(Error::unavailable("down").is_retryable());
        assert!(Error::timeout("slow").is_retryable());
    }

    #[test]
    fn the_site_is_kept_as_fields() {
        let e = Error::timeout("slow").with_site("etcd", "acquire lock \"x\"");
        let site = e.site().unwrap();
        assert_eq!(
            (site.backend, site.operation.as_str()),
            ("etcd", "acquire lock \"x\"")
        );
        assert!(Error::timeout("slow").site().is_none());
    }

    #[test]
    fn debug_reads_like_display_with_its_causes() {
        let plain = Error::unavailable("etcd at 127.0.0.1:2379 is unreachable");
        assert_eq!(format!("{plain:?}"), plain.to_string());

        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let caused = Error::unavailable("cannot reach 127.0.0.1:2379")
            .with_site("etcd", "connect")
            .with_source(io);
        assert_eq!(
            format!("{caused:?}"),
            "unavailable: cannot reach 127.0.0.1:2379\n\nCaused by:\n    connection refused"
        );
        // A cause the message already quotes is not repeated.
        let quoted = Error::backend("read failed: connection refused")
            .with_source(std::io::Error::other("connection refused"));
        assert_eq!(format!("{quoted:?}"), quoted.to_string());
        // `{:#?}` keeps the fields for those who want them.
        let dump = format!("{caused:#?}");
        assert!(
            dump.contains("kind: Unavailable") && dump.contains("site: Some("),
            "{dump}"
        );
    }

    #[test]
    fn display_names_kind_and_message() {
        let e = Error::invalid_name("lock name is empty");
        assert_eq!(e.to_string(), "invalid name: lock name is empty");
    }
}
