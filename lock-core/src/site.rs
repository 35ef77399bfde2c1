//! [`Site`]: the context a backend attaches to its errors, the same way in
//! every backend.

use std::fmt::Display;

use crate::{Error, ErrorKind};

/// Where a backend is working: its name, the server address(es), and the
/// operation. Errors made through it say all three in their message,
/// `"<backend> at <address>: <operation>: <detail>"`, and carry the backend
/// and operation as [`ErrorSite`](crate::ErrorSite) fields.
///
/// ```
/// use distlock_core::{ErrorKind, raw::Site};
/// let site = Site { backend: "redis", address: "127.0.0.1:6379", operation: "acquire lock \"x\"" };
/// let err = site.error(ErrorKind::Timeout, "no reply within 2s");
/// assert_eq!(err.message(), "redis at 127.0.0.1:6379: acquire lock \"x\": no reply within 2s");
/// assert_eq!(err.site().unwrap().backend, "redis");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Site<'a> {
    /// The backend, as its URL scheme names it (`etcd`, `redis`, `zk`, ...).
    pub backend: &'static str,
    /// The server address or addresses, or the directory.
    pub address: &'a str,
    /// What was being done, e.g. `acquire lock "jobs/x"`.
    pub operation: &'a str,
}

impl<'a> Site<'a> {
    /// The site of `operation` on `backend` at `address`.
    pub fn new(backend: &'static str, address: &'a str, operation: &'a str) -> Self {
        Site {
            backend,
            address,
            operation,
        }
    }

    /// An error of `kind` at this site; `detail` says what happened and
    /// what to do.
    pub fn error(&self, kind: ErrorKind, detail: impl Display) -> Error {
        Error::new(
            kind,
            format!(
                "{} at {}: {}: {detail}",
                self.backend, self.address, self.operation
            ),
        )
        .with_site(self.backend, self.operation)
    }
}
