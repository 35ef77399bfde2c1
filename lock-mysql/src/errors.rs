//! How MySQL's errors map onto distlock-core's kinds.
//!
//! Authentication and permission failures are `Unauthorized`, an unknown
//! database `InvalidConfig` naming it, a lost or refused connection and a
//! lock wait that gave up (a lock wait timeout, a deadlock victim: the
//! transaction was rolled back whole, so trying again is safe)
//! `Unavailable` (retryable), and anything else the server says `Backend`.
//! The messages come from the server or the driver, which never repeat the
//! password.

use distlock_core::{Error, ErrorKind};

/// Server error codes, shared by MySQL and MariaDB unless noted.
pub(crate) mod code {
    /// A database-level permission is missing.
    pub(crate) const DB_ACCESS_DENIED: u16 = 1044;
    /// Wrong user name or password.
    pub(crate) const ACCESS_DENIED: u16 = 1045;
    /// The database does not exist.
    pub(crate) const BAD_DB: u16 = 1049;
    /// `SELECT`/`INSERT`/... not allowed on a table.
    pub(crate) const TABLE_ACCESS_DENIED: u16 = 1142;
    /// A global privilege is missing.
    pub(crate) const SPECIFIC_ACCESS_DENIED: u16 = 1227;
    /// Too many connections.
    pub(crate) const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// The server is shutting down.
    pub(crate) const SERVER_SHUTDOWN: u16 = 1053;
    /// `innodb_lock_wait_timeout` passed.
    pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// Deadlock, this transaction rolled back (MariaDB's code for
    /// `GET_LOCK` deadlocks too).
    pub(crate) const DEADLOCK: u16 = 1213;
    /// The statement was killed.
    pub(crate) const QUERY_INTERRUPTED: u16 = 1317;
    /// The connection was killed.
    pub(crate) const CONNECTION_KILLED: u16 = 1927;
    /// MySQL's `GET_LOCK` deadlock.
    pub(crate) const USER_LOCK_DEADLOCK: u16 = 3058;
    /// MariaDB closed a connection idle in a transaction too long.
    pub(crate) const IDLE_TRANSACTION_TIMEOUT: u16 = 4031;
}

/// `error`, met while trying to `context`, as a distlock-core error.
pub(crate) fn from_mysql(error: mysql_async::Error, context: &str) -> Error {
    let kind = kind_of(&error);
    let detail = match &error {
        mysql_async::Error::Server(server) => {
            format!("{} ({} {})", server.message, server.code, server.state)
        }
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    };
    let hint = match (kind, server_code(&error)) {
        (ErrorKind::Unauthorized, Some(code::DB_ACCESS_DENIED)) => {
            "; the database may not exist (the server does not tell a user without \
             privileges on it), or the user may not use it"
        }
        (ErrorKind::Unauthorized, _) => {
            "; check the user name and password, and the user's privileges on the lock tables"
        }
        _ => "",
    };
    Error::new(kind, format!("could not {context}: {detail}{hint}")).with_source(error)
}

fn kind_of(error: &mysql_async::Error) -> ErrorKind {
    match error {
        mysql_async::Error::Server(server) => match server.code {
            code::ACCESS_DENIED
            | code::DB_ACCESS_DENIED
            | code::TABLE_ACCESS_DENIED
            | code::SPECIFIC_ACCESS_DENIED => ErrorKind::Unauthorized,
            code::BAD_DB => ErrorKind::InvalidConfig,
            code::TOO_MANY_CONNECTIONS
            | code::SERVER_SHUTDOWN
            | code::LOCK_WAIT_TIMEOUT
            | code::DEADLOCK
            | code::USER_LOCK_DEADLOCK
            | code::QUERY_INTERRUPTED
            | code::CONNECTION_KILLED
            | code::IDLE_TRANSACTION_TIMEOUT => ErrorKind::Unavailable,
            // Connection-level states (08xxx).
            _ if server.state.starts_with("08") => ErrorKind::Unavailable,
            _ => ErrorKind::Backend,
        },
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => ErrorKind::Unavailable,
        mysql_async::Error::Url(_) => ErrorKind::InvalidConfig,
        mysql_async::Error::Other(_) => ErrorKind::Backend,
    }
}

/// The server's error code, if the server said no.
pub(crate) fn server_code(error: &mysql_async::Error) -> Option<u16> {
    match error {
        mysql_async::Error::Server(server) => Some(server.code),
        _ => None,
    }
}

/// `Unavailable` for a request to `context` that took longer than its bound.
pub(crate) fn timed_out(context: &str, bound: std::time::Duration) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "could not {context}: no answer within {} (request_timeout)",
            distlock_core::raw::human_duration(bound)
        ),
    )
}
