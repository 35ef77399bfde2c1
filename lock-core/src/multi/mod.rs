//! Several locks held as one: all-or-nothing, in one canonical order.
//!
//! A [`MultiLockGuard`] holds a set of named locks on one backend. It is
//! acquired all-or-nothing within the caller's wait:
//! [`AcquireOptions::wait`](crate::AcquireOptions::wait) bounds the whole
//! acquisition, not each member. Members are taken in one canonical order
//! (sorted by name), so two clients locking `{a, b}` and
//! `{b, a}` never deadlock. If any member cannot be taken, the members
//! already taken are released before the error returns, and the error names
//! the member that failed.
//!
//! The guard exposes each member's fencing token, and its lost signal fires
//! when any member is lost, with that member's reason.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! use lock_core::{ErrorKind, LockBackendExt, memory::MemoryBackend};
//!
//! let backend = MemoryBackend::new();
//! let both = backend.lock_all(&["accounts/alice", "accounts/bob"]).await?;
//! let token = both.token_of("accounts/bob").expect("a member");
//! println!("moving money under tokens {:?}", both.tokens().collect::<Vec<_>>());
//! // Any member being held makes the whole set unavailable.
//! let err = backend.try_lock_all(&["accounts/bob", "accounts/carol"]).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::WouldBlock);
//! both.release().await?;
//! assert!(backend.try_lock("accounts/bob").await?.token() > token);
//! # Ok(()) }
//! ```
//!
//! The acquisition takes members one by one with the backend's own
//! `acquire`, so every backend supports it and every member keeps that
//! backend's guarantees (fencing, renewal, lost signal).

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
