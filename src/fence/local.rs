//! [`Fence`]: the highest token accepted for one lock, kept in this process.

use std::sync::Mutex;

use distlock_core::{FencingToken, LockName};

use super::{ScopedToken, Stale, TokenScope};
use crate::Backend;

/// The highest fencing token accepted for one lock, kept in this process:
/// for resources that live in the process (a cache, a connection) or that
/// one process writes for others (a file it owns).
///
/// Tokens are ordered per lock name and per lock service only, so a fence
/// belongs to one lock of one [`TokenScope`], and every token it is given
/// says where it came from ([`ScopedToken`]): a token of another service is
/// refused with [`Stale::OtherScope`], one of another lock with
/// [`Stale::OtherLock`], whatever their numbers.
///
/// ```
/// use distlock::fence::{Fence, ScopedToken, Stale, TokenScope};
/// use distlock::{FencingToken, LockName};
///
/// let lock = LockName::new("reports/nightly").unwrap();
/// let fence = Fence::new(TokenScope::new("etcd"), lock.clone());
/// let token = |n| ScopedToken::new(TokenScope::new("etcd"), lock.clone(), FencingToken(n));
/// assert_eq!(fence.check(&token(7)), Ok(()));
/// // The same holder again: accepted.
/// assert_eq!(fence.check(&token(7)), Ok(()));
/// // A holder paused past its lease, writing after holder 9 took over.
/// fence.check(&token(9)).unwrap();
/// assert!(matches!(fence.check(&token(7)), Err(Stale::Superseded { .. })));
/// // Another lock's token means nothing here, however high.
/// let other = ScopedToken::new(
///     TokenScope::new("etcd"),
///     LockName::new("reports/weekly").unwrap(),
///     FencingToken(100),
/// );
/// assert!(matches!(fence.check(&other), Err(Stale::OtherLock { .. })));
/// ```
///
/// With a [`Backend`], [`Fence::for_backend`] takes its scope and
/// [`Backend::scoped_token`] a guard's token. Check and write under the
/// same critical section ([`write`](Self::write)), or check again right
/// before the write: a check that passed says nothing about a write made
/// later.
#[derive(Debug)]
pub struct Fence {
    state: Mutex<FenceState>,
}

#[derive(Debug)]
struct FenceState {
    scope: TokenScope,
    lock: LockName,
    highest: Option<FencingToken>,
}

impl FenceState {
    /// Accepts `token` under the rule of [`crate::fence`], remembering it.
    fn accept(&mut self, token: &ScopedToken) -> Result<(), Stale> {
        if token.scope() != &self.scope {
            return Err(Stale::OtherScope {
                token_scope: token.scope().clone(),
                fence_scope: self.scope.clone(),
            });
        }
        if token.lock() != &self.lock {
            return Err(Stale::OtherLock {
                token_lock: token.lock().clone(),
                fence_lock: self.lock.clone(),
            });
        }
        match self.highest {
            Some(highest) if token.token() < highest => Err(Stale::Superseded {
                token: token.token(),
                highest,
            }),
            _ => {
                self.highest = Some(token.token());
                Ok(())
            }
        }
    }
}

impl Fence {
    /// A fence for the tokens of `lock` from a service of `scope`, which
    /// has accepted none yet.
    pub fn new(scope: TokenScope, lock: LockName) -> Self {
        Fence {
            state: Mutex::new(FenceState {
                scope,
                lock,
                highest: None,
            }),
        }
    }

    /// A fence for the tokens of `lock` on `backend` ([`Backend::token_scope`]).
    pub fn for_backend(backend: &Backend, lock: &LockName) -> Self {
        Fence::new(backend.token_scope(), lock.clone())
    }

    /// Accepts `token` if it is of this fence's scope and lock and no
    /// higher token was accepted, remembering it; else [`Stale`] says which
    /// of the three failed.
    pub fn check(&self, token: &ScopedToken) -> Result<(), Stale> {
        self.state().accept(token)
    }

    /// Runs `write` only if `token` passes [`check`](Self::check), with the
    /// fence held, so no other check can pass in between.
    pub fn write<T>(&self, token: &ScopedToken, write: impl FnOnce() -> T) -> Result<T, Stale> {
        let mut state = self.state();
        state.accept(token)?;
        Ok(write())
    }

    /// The highest token accepted, if any.
    pub fn highest(&self) -> Option<FencingToken> {
        self.state().highest
    }

    /// The scope whose tokens this fence accepts.
    pub fn scope(&self) -> TokenScope {
        self.state().scope.clone()
    }

    /// The lock whose tokens this fence accepts.
    pub fn lock_name(&self) -> LockName {
        self.state().lock.clone()
    }

    /// The switch to another lock service: forgets the highest token and
    /// accepts tokens of `scope` (for the same lock) from now on. Only once
    /// no holder of the old service can still write (all stopped, or their
    /// longest lease over): from here on the fence cannot tell their tokens
    /// from new ones.
    pub fn reset(&self, scope: TokenScope) {
        let mut state = self.state();
        state.scope = scope;
        state.highest = None;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FenceState> {
        // The state is plain values, consistent after any panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(name: &str) -> LockName {
        LockName::new(name).unwrap()
    }

    fn token(scope: &str, name: &str, n: u64) -> ScopedToken {
        ScopedToken::new(TokenScope::new(scope), lock(name), FencingToken(n))
    }

    #[test]
    fn equal_tokens_pass_and_lower_ones_are_refused() {
        let fence = Fence::new(TokenScope::new("etcd"), lock("a"));
        assert_eq!(fence.check(&token("etcd", "a", 5)), Ok(()));
        assert_eq!(fence.check(&token("etcd", "a", 5)), Ok(()));
        assert_eq!(fence.check(&token("etcd", "a", 6)), Ok(()));
        assert_eq!(
            fence.check(&token("etcd", "a", 5)),
            Err(Stale::Superseded {
                token: FencingToken(5),
                highest: FencingToken(6)
            })
        );
        assert_eq!(
            fence.write(&token("etcd", "a", 4), || "x"),
            Err(Stale::Superseded {
                token: FencingToken(4),
                highest: FencingToken(6)
            })
        );
        assert_eq!(fence.write(&token("etcd", "a", 7), || "y"), Ok("y"));
        assert_eq!(fence.highest(), Some(FencingToken(7)));
    }

    #[test]
    fn tokens_of_another_service_are_refused_by_check_and_write_until_a_reset() {
        let fence = Fence::new(TokenScope::new("redis"), lock("a"));
        fence
            .check(&token("redis", "a", 1_700_000_000_000_001))
            .unwrap();
        let err = fence.check(&token("etcd", "a", 12)).unwrap_err();
        assert_eq!(
            err,
            Stale::OtherScope {
                token_scope: TokenScope::new("etcd"),
                fence_scope: TokenScope::new("redis"),
            }
        );
        assert!(err.to_string().contains("reset the fence to etcd"), "{err}");
        let mut wrote = false;
        let refused = fence.write(&token("etcd", "a", 1_800_000_000_000_000), || wrote = true);
        assert!(
            matches!(refused, Err(Stale::OtherScope { .. })),
            "{refused:?}"
        );
        assert!(!wrote, "a write of another scope ran");
        assert_eq!(fence.highest(), Some(FencingToken(1_700_000_000_000_001)));

        fence.reset(TokenScope::new("etcd"));
        assert_eq!(fence.check(&token("etcd", "a", 12)), Ok(()));
        assert!(
            fence
                .check(&token("redis", "a", 1_700_000_000_000_002))
                .is_err()
        );
    }

    #[test]
    fn tokens_of_another_lock_are_refused_by_check_and_write() {
        let fence = Fence::new(TokenScope::new("etcd"), lock("a"));
        fence.check(&token("etcd", "a", 5)).unwrap();
        let err = fence.check(&token("etcd", "b", 9)).unwrap_err();
        assert_eq!(
            err,
            Stale::OtherLock {
                token_lock: lock("b"),
                fence_lock: lock("a"),
            }
        );
        assert!(err.to_string().contains("lock b"), "{err}");
        let mut wrote = false;
        let refused = fence.write(&token("etcd", "b", 9), || wrote = true);
        assert!(
            matches!(refused, Err(Stale::OtherLock { .. })),
            "{refused:?}"
        );
        assert!(!wrote, "a write under another lock's token ran");
        assert_eq!(fence.highest(), Some(FencingToken(5)), "not raised");
        assert_eq!(fence.check(&token("etcd", "a", 5)), Ok(()));
        assert_eq!(fence.lock_name(), lock("a"));
    }

    /// A backend's guards fence their own lock: a newer holder's token
    /// supersedes the old one's, and a guard of another lock, though of the
    /// same backend, is refused.
    #[tokio::test]
    async fn a_backend_guard_fences_its_own_lock_only() {
        use distlock_core::LockBackendExt;

        let backend = crate::connect("memory://fence-scoped-token").await.unwrap();
        let fence = Fence::for_backend(&backend, &lock("fenced/a"));
        assert_eq!(fence.scope(), backend.token_scope());
        let first = backend.lock("fenced/a").await.unwrap();
        let stale = backend.scoped_token(&first);
        assert_eq!(stale.lock(), &lock("fenced/a"));
        assert_eq!(fence.write(&stale, || ()), Ok(()));
        first.release().await.unwrap();
        let second = backend.lock("fenced/a").await.unwrap();
        assert_eq!(fence.write(&backend.scoped_token(&second), || ()), Ok(()));
        assert!(matches!(
            fence.write(&stale, || ()),
            Err(Stale::Superseded { .. })
        ));
        let other = backend.lock("fenced/b").await.unwrap();
        assert!(matches!(
            fence.check(&backend.scoped_token(&other)),
            Err(Stale::OtherLock { .. })
        ));
    }
}
