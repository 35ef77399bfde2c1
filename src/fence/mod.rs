//! Fencing at the resource: the data checks the lock's token itself, so a
//! holder that was paused past its lease (a GC pause, a stopped VM, a slow
//! network) cannot overwrite the work of the holder that came after it.
//!
//! The rule, everywhere in distlock: **a resource remembers the highest
//! token it has accepted; an equal token is the same holder and is
//! accepted, a lower token is refused.** Every acquisition gets a token
//! higher than every earlier acquisition of the same lock, so "lower" means
//! "from a holder whose lock has since been taken by someone else".
//!
//! Three recipes, all following that rule:
//!
//! - [`SqlFence`]: a `fence BIGINT` column and a claim-then-write
//!   transaction (no database crate needed here: it hands you SQL text and
//!   the token as an `i64`).
//! - [`REDIS_FENCED_SET`]: a compare-and-set Lua script for a Redis key that
//!   is not the lock's own.
//! - [`Fence`]: the highest token seen for one lock, kept in process, for
//!   in-process or file resources.
//!
//! # Tokens of one lock only
//!
//! Tokens increase per lock name: token 9 of lock `a` says nothing about
//! token 7 of lock `b`. A [`Fence`] belongs to one lock and refuses another
//! lock's tokens ([`Stale::OtherLock`]); a row under [`SqlFence`] or a key
//! under [`REDIS_FENCED_SET`] must likewise be written under one lock name
//! only, which their SQL and script cannot check.
//!
//! # Tokens from one lock service only
//!
//! Tokens from different lock services are not comparable: Redis seeds its
//! counters from the server clock in microseconds (about 1.7e15), while
//! etcd revisions and file counters start small. After switching backends,
//! a fence that kept its old highest token would refuse every new holder
//! (switching down) or accept a late write from the old service (switching
//! up). So every fence here stores a [`TokenScope`], the kind of lock
//! service its tokens came from, beside the token, and refuses tokens of
//! another scope on every path that accepts one. Switching is an explicit reset step: stop every holder of
//! the old service (or wait out its longest lease), then reset the fence
//! to the new scope ([`Fence::reset`], [`SqlFence::reset`]).
//!
//! A scope names the kind of service, not the cluster: moving to another
//! etcd cluster or Redis server of the same kind is a switch all the same,
//! and needs the same reset.
//!
//! See `docs/fencing.md` in the repository for the full guide.

mod local;
mod redis;
mod sql;

use std::fmt;

use distlock_core::{FencingToken, LockGuard, LockName};

use crate::Backend;

pub use local::Fence;
#[cfg(feature = "redis")]
pub use redis::redis_fenced_set;
pub use redis::{REDIS_FENCED_SET, RedisFenceReply, redis_fence_reply, redis_fenced_set_args};
pub use sql::{InvalidIdentifier, SqlFence, sql_token};

/// The kind of lock service a fencing token came from (`etcd`, `redis`,
/// `redis-cluster`, `redlock`, `zk`, `file`, `memory`): tokens are only
/// comparable within one scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenScope(String);

impl TokenScope {
    /// The scope named `name`, as [`Backend::token_scope`] names it.
    pub fn new(name: impl Into<String>) -> Self {
        TokenScope(name.into())
    }

    /// The scope's name, to store beside a token.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TokenScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A fencing token with what makes it comparable: the lock service it came
/// from and the lock it was granted for. What a [`Fence`] takes, so that a
/// bare number can never be checked against another lock's or service's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedToken {
    scope: TokenScope,
    lock: LockName,
    token: FencingToken,
}

impl ScopedToken {
    /// `token` of `lock`, from a lock service of `scope`.
    pub fn new(scope: TokenScope, lock: LockName, token: FencingToken) -> Self {
        ScopedToken { scope, lock, token }
    }

    /// The scope of the service that granted it.
    pub fn scope(&self) -> &TokenScope {
        &self.scope
    }

    /// The lock it was granted for.
    pub fn lock(&self) -> &LockName {
        &self.lock
    }

    /// The token itself.
    pub fn token(&self) -> FencingToken {
        self.token
    }
}

impl Backend {
    /// The scope of this backend's fencing tokens: its kind, as
    /// [`Capabilities::backend`](crate::Capabilities::backend) names it.
    /// Store it beside the token wherever you fence (see [`crate::fence`]).
    pub fn token_scope(&self) -> TokenScope {
        TokenScope::new(self.capabilities().backend)
    }

    /// The token of `guard`, a guard of this backend, with this backend's
    /// scope and the guard's lock name: what a [`Fence`] checks. For a
    /// leadership, pass [`Leadership::guard`](crate::Leadership::guard).
    pub fn scoped_token(&self, guard: &LockGuard) -> ScopedToken {
        ScopedToken::new(self.token_scope(), guard.name().clone(), guard.token())
    }
}

/// A write refused by a fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// A newer holder's token was accepted already.
    Superseded {
        /// The refused token.
        token: FencingToken,
        /// The highest token accepted so far.
        highest: FencingToken,
    },
    /// The token comes from another lock service than the fence's; see
    /// [Tokens from one lock service only](crate::fence#tokens-from-one-lock-service-only).
    OtherScope {
        /// The scope of the refused token.
        token_scope: TokenScope,
        /// The fence's scope.
        fence_scope: TokenScope,
    },
    /// The token was granted for another lock than the fence's; see
    /// [Tokens of one lock only](crate::fence#tokens-of-one-lock-only).
    OtherLock {
        /// The lock of the refused token.
        token_lock: LockName,
        /// The fence's lock.
        fence_lock: LockName,
    },
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stale::Superseded { token, highest } => write!(
                f,
                "stale fencing token {token}: token {highest} was accepted already, so a newer \
                 holder has the lock; nothing was written"
            ),
            Stale::OtherScope {
                token_scope,
                fence_scope,
            } => write!(
                f,
                "fencing token from {token_scope} refused by a fence of {fence_scope}: tokens \
                 of different lock services are not comparable; reset the fence to \
                 {token_scope} once no {fence_scope} holder can still write"
            ),
            Stale::OtherLock {
                token_lock,
                fence_lock,
            } => write!(
                f,
                "fencing token of lock {token_lock} refused by the fence of lock {fence_lock}: \
                 tokens are ordered per lock name, so another lock's token says nothing here; \
                 nothing was written"
            ),
        }
    }
}

impl std::error::Error for Stale {}
