//! The guard of a multi-lock: every member's guard, one lost signal.

use std::fmt;

use futures::future::join_all;

use super::watch::Watch;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::guard::LockGuard;
use crate::lost::{LostReason, LostSignal};
use crate::name::LockName;

/// Several locks held as one: all-or-nothing, in one canonical order.
///
/// A [`MultiLockGuard`] holds a set of named locks on one backend. It is
/// acquired all-or-nothing within the caller's wait:
/// [`AcquireOptions::wait`](crate::AcquireOptions::wait) bounds the whole
/// acquisition, not each member. Members are taken in one canonical order
/// (sorted by name), so two clients locking `{a, b}` and
/// `{b, a}` never deadlock. If any member cannot be taken, the members
/// already taken are released before the error returns, and the error names
/// the member that failed.
///
/// The guard exposes each member's fencing token, and its lost signal fires
/// when any member is lost, with that member's reason.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// use distlock_core::{ErrorKind, LockBackendExt, memory::MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let both = backend.lock_all(&["accounts/alice", "accounts/bob"]).await?;
/// let token = both.token_of("accounts/bob").expect("a member");
/// println!("moving money under tokens {:?}", both.tokens().collect::<Vec<_>>());
/// // Any member being held makes the whole set unavailable.
/// let err = backend.try_lock_all(&["accounts/bob", "accounts/carol"]).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::WouldBlock);
/// both.release().await?;
/// assert!(backend.try_lock("accounts/bob").await?.token() > token);
/// # Ok(()) }
/// ```
///
/// The acquisition takes members one by one with the backend's own
/// `acquire`, so every backend supports it and every member keeps that
/// backend's guarantees (fencing, renewal, lost signal).
///
/// It holds while every member holds. Its lost signal fires when any
/// member is lost, with that member's reason, and
/// [`lost_member`](Self::lost_member) says which one it was.
///
/// # Dropping the guard
///
/// Dropping it drops every member's [`LockGuard`], which releases in the
/// background as a dropped `LockGuard` does; the lease TTL is the backstop.
pub struct MultiLockGuard {
    members: Vec<LockGuard>,
    watch: Watch,
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("members", &self.members)
            .field("held", &self.is_held())
            .finish()
    }
}

impl MultiLockGuard {
    /// Wraps the members, in canonical order, and starts watching them.
    pub(crate) fn new(members: Vec<LockGuard>) -> Self {
        let signals = members
            .iter()
            .map(|m| (m.name().clone(), m.lost_signal()))
            .collect();
        MultiLockGuard {
            members,
            watch: Watch::start(signals),
        }
    }

    /// The members' names, sorted: the order they were taken in.
    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        self.members.iter().map(LockGuard::name)
    }

    /// Each member's name and fencing token, in canonical order. Pass each
    /// token to the resource its lock protects.
    pub fn tokens(&self) -> impl Iterator<Item = (&LockName, FencingToken)> {
        self.members.iter().map(|m| (m.name(), m.token()))
    }

    /// The fencing token of member `name`, or `None` if it is not a member.
    pub fn token_of(&self, name: &str) -> Option<FencingToken> {
        self.member(name).map(LockGuard::token)
    }

    /// The guard of member `name`, or `None` if it is not a member.
    pub fn member(&self, name: &str) -> Option<&LockGuard> {
        self.members.iter().find(|m| m.name().as_str() == name)
    }

    /// Every member's guard, in canonical order.
    pub fn members(&self) -> &[LockGuard] {
        &self.members
    }

    /// Whether every member is still held. A `false` here is final.
    pub fn is_held(&self) -> bool {
        !self.watch.notifier.is_fired() && self.members.iter().all(LockGuard::is_held)
    }

    /// A cloneable signal that resolves when any member is gone, with
    /// that member's reason (or [`LostReason::Released`] once released).
    pub fn lost_signal(&self) -> LostSignal {
        self.watch.notifier.signal()
    }

    /// Waits until any member is gone and returns why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the signal.
    pub async fn lost(&self) -> LostReason {
        self.lost_signal().lost().await
    }

    /// The member whose loss fired the lost signal, once one has.
    pub fn lost_member(&self) -> Option<&LockName> {
        self.watch.lost_member.get()
    }

    /// Releases every member and reports the first error, naming its
    /// member. Members that fail to release are freed by their TTL; the
    /// others are released all the same.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled release may or may not have deleted
    /// each member. Either way no member is renewed any more, so the TTL
    /// frees it.
    pub async fn release(mut self) -> Result<()> {
        self.watch.notifier.fire(LostReason::Released);
        let members = std::mem::take(&mut self.members);
        let results = join_all(members.into_iter().map(|m| {
            let name = m.name().clone();
            async move { (name, m.release().await) }
        }))
        .await;
        match results.into_iter().find(|(_, r)| r.is_err()) {
            Some((name, Err(e))) => Err(release_failed(&name, e)),
            _ => Ok(()),
        }
    }

    /// Stops renewing every member without releasing, as if this process
    /// had crashed: each member stays taken until its TTL runs out.
    pub fn abandon(mut self) {
        self.watch.notifier.fire(LostReason::Released);
        for member in std::mem::take(&mut self.members) {
            member.abandon();
        }
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        self.watch.notifier.fire(LostReason::Released);
    }
}

fn release_failed(name: &LockName, e: Error) -> Error {
    let context = format!("releasing lock {name} of a multi-lock");
    let message = e.message().to_owned();
    super::member_error(context, message, e)
}
