//! Several locks held as one: see [`MultiLockGuard`].

mod acquire;
mod guard;
mod set;
mod watch;

pub use guard::MultiLockGuard;

pub(crate) use acquire::acquire_all;
pub(crate) use set::parse as parse_set;

/// A member's error `e`, of the same kind and site, its message prefixed
/// with `context`.
fn member_error(context: String, message: String, e: crate::Error) -> crate::Error {
    let mut error = crate::Error::new(e.kind(), format!("{context}: {message}"));
    if let Some(site) = e.site() {
        error = error.with_site(site.backend, site.operation.clone());
    }
    error.with_source(e)
}

#[cfg(test)]
mod tests;
