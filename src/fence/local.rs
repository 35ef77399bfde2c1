//! [`Fence`]: the highest token accepted, kept in this process.

use std::sync::Mutex;

use distlock_core::FencingToken;

use super::{Stale, TokenScope};
use crate::Backend;

/// The highest fencing token accepted, kept in this process: for resources
/// that live in the process (a cache, a connection) or that one process
/// writes for others (a file it owns).
///
/// ```
/// use distlock::fence::{Fence, Stale, TokenScope};
/// use distlock::FencingToken;
///
/// let fence = Fence::new(TokenScope::new("etcd"));
/// assert_eq!(fence.check(FencingToken(7)), Ok(()));
/// // The same holder again: accepted.
/// assert_eq!(fence.check(FencingToken(7)), Ok(()));
/// // A holder paused past its lease, writing after holder 9 took over.
/// fence.check(FencingToken(9)).unwrap();
/// assert!(matches!(fence.check(FencingToken(7)), Err(Stale::Superseded { .. })));
/// ```
///
/// With a [`Backend`], [`Fence::for_backend`] takes its scope. Check and
/// write under the same critical section (or check again right before the
/// write): a check that passed says nothing about a write made later.
#[derive(Debug)]
pub struct Fence {
    state: Mutex<FenceState>,
}

#[derive(Debug)]
struct FenceState {
    scope: TokenScope,
    highest: Option<FencingToken>,
}

impl Fence {
    /// A fence for tokens of `scope` that has accepted none yet.
    pub fn new(scope: TokenScope) -> Self {
        Fence {
            state: Mutex::new(FenceState {
                scope,
                highest: None,
            }),
        }
    }

    /// A fence for the tokens of `backend` ([`Backend::token_scope`]).
    pub fn for_backend(backend: &Backend) -> Self {
        Fence::new(backend.token_scope())
    }

    /// Accepts `token` (of this fence's scope) if no higher token was
    /// accepted, remembering it; else [`Stale::Superseded`].
    pub fn check(&self, token: FencingToken) -> Result<(), Stale> {
        let mut state = self.lock();
        match state.highest {
            Some(highest) if token < highest => Err(Stale::Superseded { token, highest }),
            _ => {
                state.highest = Some(token);
                Ok(())
            }
        }
    }

    /// As [`check`](Self::check), for a token of `scope`: one of another
    /// scope is refused with [`Stale::OtherScope`].
    pub fn check_from(&self, scope: &TokenScope, token: FencingToken) -> Result<(), Stale> {
        {
            let state = self.lock();
            if &state.scope != scope {
                return Err(Stale::OtherScope {
                    token_scope: scope.clone(),
                    fence_scope: state.scope.clone(),
                });
            }
        }
        self.check(token)
    }

    /// Runs `write` only if `token` passes [`check`](Self::check), with the
    /// fence held, so no other check can pass in between.
    pub fn write<T>(&self, token: FencingToken, write: impl FnOnce() -> T) -> Result<T, Stale> {
        let mut state = self.lock();
        match state.highest {
            Some(highest) if token < highest => Err(Stale::Superseded { token, highest }),
            _ => {
                state.highest = Some(token);
                Ok(write())
            }
        }
    }

    /// The highest token accepted, if any.
    pub fn highest(&self) -> Option<FencingToken> {
        self.lock().highest
    }

    /// The scope whose tokens this fence accepts.
    pub fn scope(&self) -> TokenScope {
        self.lock().scope.clone()
    }

    /// The switch to another lock service: forgets the highest token and
    /// accepts tokens of `scope` from now on. Only once no holder of the old
    /// service can still write (all stopped, or their longest lease over):
    /// from here on the fence cannot tell their tokens from new ones.
    pub fn reset(&self, scope: TokenScope) {
        let mut state = self.lock();
        state.scope = scope;
        state.highest = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        // The state is two plain values, consistent after any panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_tokens_pass_and_lower_ones_are_refused() {
        let fence = Fence::new(TokenScope::new("etcd"));
        assert_eq!(fence.check(FencingToken(5)), Ok(()));
        assert_eq!(fence.check(FencingToken(5)), Ok(()));
        assert_eq!(fence.check(FencingToken(6)), Ok(()));
        assert_eq!(
            fence.check(FencingToken(5)),
            Err(Stale::Superseded {
                token: FencingToken(5),
                highest: FencingToken(6)
            })
        );
        assert_eq!(
            fence.write(FencingToken(4), || "x"),
            Err(Stale::Superseded {
                token: FencingToken(4),
                highest: FencingToken(6)
            })
        );
        assert_eq!(fence.write(FencingToken(7), || "y"), Ok("y"));
        assert_eq!(fence.highest(), Some(FencingToken(7)));
    }

    #[test]
    fn tokens_of_another_service_are_refused_until_a_reset() {
        let fence = Fence::new(TokenScope::new("redis"));
        let redis = TokenScope::new("redis");
        let etcd = TokenScope::new("etcd");
        fence
            .check_from(&redis, FencingToken(1_700_000_000_000_001))
            .unwrap();
        let err = fence.check_from(&etcd, FencingToken(12)).unwrap_err();
        assert!(matches!(err, Stale::OtherScope { .. }), "{err}");
        assert!(err.to_string().contains("reset the fence to etcd"), "{err}");
        fence.reset(etcd.clone());
        assert_eq!(fence.check_from(&etcd, FencingToken(12)), Ok(()));
        assert!(
            fence
                .check_from(&redis, FencingToken(1_700_000_000_000_002))
                .is_err()
        );
    }
}
