//! How PostgreSQL's errors map onto distlock-core's kinds.
//!
//! Authentication and permission failures are `Unauthorized`, a missing
//! database `InvalidConfig` naming it, a lost or refused connection
//! `Unavailable` (retryable), as is a lock statement that waited longer than
//! the lock functions' `lock_timeout` (one second) for another transaction,
//! and anything else the server says `Backend`.
//! The messages come from the server or the driver, which never repeat the
//! password.

use distlock_core::{Error, ErrorKind};
use tokio_postgres::error::SqlState;

/// `error`, met while trying to `context`, as a distlock-core error.
pub(crate) fn from_pg(error: tokio_postgres::Error, context: &str) -> Error {
    let kind = kind_of(&error);
    let detail = match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            // The driver's own text leaves out the cause (an I/O error, a
            // certificate rustls refused): add the chain.
            let mut text = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    };
    let hint = match kind {
        ErrorKind::Unauthorized => {
            "; check the user name and password, and the role's privileges on the lock schema"
        }
        _ if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
            "; another transaction holds the lock's rows, such as a fenced transaction of its \
             holder, which a release or a break waits for"
        }
        _ => "",
    };
    Error::new(kind, format!("could not {context}: {detail}{hint}")).with_source(error)
}

fn kind_of(error: &tokio_postgres::Error) -> ErrorKind {
    let Some(code) = error.code() else {
        // No SQLSTATE: the connection failed, closed, or timed out.
        return ErrorKind::Unavailable;
    };
    if *code == SqlState::INVALID_PASSWORD
        || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        || *code == SqlState::INSUFFICIENT_PRIVILEGE
    {
        ErrorKind::Unauthorized
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        ErrorKind::InvalidConfig
    } else if code.code().starts_with("08")
        || code.code().starts_with("57P")
        || *code == SqlState::TOO_MANY_CONNECTIONS
        || *code == SqlState::CANNOT_CONNECT_NOW
        || *code == SqlState::LOCK_NOT_AVAILABLE
    {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Backend
    }
}

/// `Timeout` for a request to `context` that took longer than its bound.
pub(crate) fn timed_out(context: &str, bound: std::time::Duration) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "could not {context}: no answer within {} (request_timeout)",
            distlock_core::raw::human_duration(bound)
        ),
    )
}
