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
//! - [`Fence`]: the highest token seen, kept in process, for in-process or
//!   file resources.
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
//! another scope. Switching is an explicit reset step: stop every holder of
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

use distlock_core::FencingToken;

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

impl Backend {
    /// The scope of this backend's fencing tokens: its kind, as
    /// [`Capabilities::backend`](crate::Capabilities::backend) names it.
    /// Store it beside the token wherever you fence (see [`crate::fence`]).
    pub fn token_scope(&self) -> TokenScope {
        TokenScope::new(self.capabilities().backend)
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
        }
    }
}

impl std::error::Error for Stale {}
