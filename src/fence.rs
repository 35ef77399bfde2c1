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

use std::fmt;
use std::sync::Mutex;

use lock_core::{FencingToken, TokenRangeError};

use crate::Backend;

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

/// A fencing token as SQL's `BIGINT` (`i64`), checked: a token past
/// `i64::MAX` is an error naming it, never a wrapped negative number that
/// every stale holder would beat.
pub fn sql_token(token: FencingToken) -> Result<i64, TokenRangeError> {
    token.to_i64()
}

/// A name that cannot be used as an SQL identifier here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidIdentifier {
    what: &'static str,
    name: String,
}

impl fmt::Display for InvalidIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} is not a plain SQL identifier: use ASCII letters, digits and '_' (not \
             starting with a digit), optionally schema-qualified with one '.'",
            self.what, self.name
        )
    }
}

impl std::error::Error for InvalidIdentifier {}

fn identifier(what: &'static str, name: &str, dotted: bool) -> Result<String, InvalidIdentifier> {
    let part_ok = |part: &str| {
        !part.is_empty()
            && !part.starts_with(|c: char| c.is_ascii_digit())
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = name.split('.').collect();
    let ok = parts.iter().all(|p| part_ok(p)) && (parts.len() == 1 || dotted && parts.len() == 2);
    if ok {
        Ok(name.to_owned())
    } else {
        Err(InvalidIdentifier {
            what,
            name: name.to_owned(),
        })
    }
}

/// The SQL of fencing rows of a table: a `fence BIGINT` column with the
/// highest token accepted for the row and a `fence_scope TEXT` column with
/// its [`TokenScope`].
///
/// A write under a lock is one transaction that **claims the row first**,
/// then reads and writes it:
///
/// ```text
/// BEGIN;
/// UPDATE accounts SET fence = $2, fence_scope = $3
///   WHERE id = $1 AND fence <= $2 AND (fence_scope = $3 OR fence_scope = '')
///   RETURNING *;                      -- no row: stale (or no such row); ROLLBACK
/// UPDATE accounts SET balance = ... WHERE id = $1;
/// COMMIT;
/// ```
///
/// with `$1` the row's id, `$2` the token as [`sql_token`] converts it and
/// `$3` the backend's [`TokenScope`]. The claim takes the row lock, so the
/// read in `RETURNING` and the write that follows see no other holder's
/// write; a newer holder's claim raised `fence` and refuses ours. An equal
/// token is the same holder and passes.
///
/// Do not read first and claim later (`SELECT`, compute, then `UPDATE …
/// WHERE fence <= $token`): after a `break` (or an expiry), the new holder
/// (token 6) can read the row before the old holder's (token 5) update
/// lands, and write after it. Both updates pass their checks (5 ≤ the fence
/// then, 6 ≥ 5 after), so the old holder's update is silently lost.
///
/// ```
/// use distlock::fence::SqlFence;
///
/// let fence = SqlFence::new("accounts").unwrap();
/// assert_eq!(
///     fence.claim(),
///     "UPDATE accounts SET fence = $2, fence_scope = $3 WHERE id = $1 AND fence <= $2 \
///      AND (fence_scope = $3 OR fence_scope = '') RETURNING *"
/// );
/// assert!(SqlFence::new("accounts; DROP TABLE x").is_err());
/// ```
#[derive(Debug, Clone)]
pub struct SqlFence {
    table: String,
    id: String,
}

impl SqlFence {
    /// The fence of `table` (optionally `schema.table`), whose rows are
    /// keyed by an `id` column.
    pub fn new(table: &str) -> Result<Self, InvalidIdentifier> {
        Ok(SqlFence {
            table: identifier("table", table, true)?,
            id: "id".to_owned(),
        })
    }

    /// Keys rows by `column` instead of `id`.
    pub fn with_id_column(mut self, column: &str) -> Result<Self, InvalidIdentifier> {
        self.id = identifier("id column", column, false)?;
        Ok(self)
    }

    /// Adds the fence columns to the table (Postgres syntax); new rows
    /// start at fence 0 and an empty scope, which the first claim takes.
    pub fn add_columns(&self) -> String {
        format!(
            "ALTER TABLE {} ADD COLUMN fence BIGINT NOT NULL DEFAULT 0, \
             ADD COLUMN fence_scope TEXT NOT NULL DEFAULT ''",
            self.table
        )
    }

    /// The claim: `$1` the row's id, `$2` the token ([`sql_token`]), `$3`
    /// the scope. Returns the row if the token is not stale, else no row.
    pub fn claim(&self) -> String {
        format!(
            "UPDATE {} SET fence = $2, fence_scope = $3 WHERE {} = $1 AND fence <= $2 \
             AND (fence_scope = $3 OR fence_scope = '') RETURNING *",
            self.table, self.id
        )
    }

    /// The switch to another lock service, for every row: `$1` the new
    /// scope. Only once no holder of the old service can still write.
    pub fn reset(&self) -> String {
        format!("UPDATE {} SET fence = 0, fence_scope = $1", self.table)
    }
}

/// A fenced `SET` of a Redis key that is not the lock's own (in any Redis,
/// whatever the lock backend): a Lua compare-and-set on a fence hash.
///
/// KEYS: 1 the fence (a hash of `scope` and `token`), 2 the data key; on a
/// Redis Cluster give both one hash tag, e.g. `{report}:fence` and
/// `{report}:data`. ARGV: 1 the [`TokenScope`], 2 the token in decimal, 3
/// the value.
///
/// With the fence key alone (no data key) it only claims: it raises the
/// fence to the token, or refuses. Claim before you read what you will
/// write (a read-modify-write such as a counter), then write with the same
/// token; see [`SqlFence`] for why.
///
/// Returns `{1, token}` when written; `{0, highest}` when a higher token
/// was accepted already (stale); `{-1, scope}` when the fence holds another
/// scope's tokens. Tokens are compared as decimal strings (length, then
/// digits), exact over all of `u64`, where Lua numbers are not.
pub const REDIS_FENCED_SET: &str = r#"
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local f = redis.call('HMGET', KEYS[1], 'scope', 'token')
if f[1] and f[1] ~= ARGV[1] then return {-1, f[1]} end
if f[2] and below(ARGV[2], f[2]) then return {0, f[2]} end
redis.call('HSET', KEYS[1], 'scope', ARGV[1], 'token', ARGV[2])
if KEYS[2] then redis.call('SET', KEYS[2], ARGV[3]) end
return {1, ARGV[2]}
"#;

/// The arguments of [`REDIS_FENCED_SET`] for `token` of `scope` and
/// `value`, in order.
pub fn redis_fenced_set_args(
    scope: &TokenScope,
    token: FencingToken,
    value: impl Into<Vec<u8>>,
) -> [Vec<u8>; 3] {
    [
        scope.as_str().as_bytes().to_vec(),
        token.get().to_string().into_bytes(),
        value.into(),
    ]
}

/// [`REDIS_FENCED_SET`] as a `redis::Script`, hashed once, for
/// `script.key(fence).key(data).arg(..)` (feature `redis`).
#[cfg(feature = "redis")]
pub fn redis_fenced_set() -> lock_redis::redis::Script {
    lock_redis::redis::Script::new(REDIS_FENCED_SET)
}

/// What [`REDIS_FENCED_SET`] replied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisFenceReply {
    /// Written, with this token now the fence.
    Written,
    /// Refused: see [`Stale`].
    Refused(Stale),
}

/// Reads the reply of [`REDIS_FENCED_SET`] (its status and its text, as
/// `(i64, String)`) for `token` of `scope`; `None` for a reply the script
/// does not make.
pub fn redis_fence_reply(
    scope: &TokenScope,
    token: FencingToken,
    (status, text): (i64, String),
) -> Option<RedisFenceReply> {
    match status {
        1 => Some(RedisFenceReply::Written),
        0 => Some(RedisFenceReply::Refused(Stale::Superseded {
            token,
            highest: FencingToken(text.parse().ok()?),
        })),
        -1 => Some(RedisFenceReply::Refused(Stale::OtherScope {
            token_scope: scope.clone(),
            fence_scope: TokenScope::new(text),
        })),
        _ => None,
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

    #[test]
    fn sql_identifiers_are_checked_and_tokens_convert_checked() {
        assert!(SqlFence::new("app.accounts").is_ok());
        for bad in ["", "1t", "a b", "t;--", "a.b.c", "\"t\""] {
            let err = SqlFence::new(bad).unwrap_err();
            assert!(err.to_string().contains("table"), "{err}");
        }
        assert!(SqlFence::new("t").unwrap().with_id_column("a.b").is_err());
        let fence = SqlFence::new("t").unwrap().with_id_column("key").unwrap();
        assert!(fence.claim().contains("WHERE key = $1 AND fence <= $2"));
        assert_eq!(sql_token(FencingToken(42)), Ok(42));
        assert!(sql_token(FencingToken(u64::MAX)).is_err());
    }

    #[test]
    fn redis_replies_read_back() {
        let scope = TokenScope::new("redis");
        let token = FencingToken(3);
        assert_eq!(
            redis_fence_reply(&scope, token, (1, "3".into())),
            Some(RedisFenceReply::Written)
        );
        assert_eq!(
            redis_fence_reply(&scope, token, (0, "9".into())),
            Some(RedisFenceReply::Refused(Stale::Superseded {
                token,
                highest: FencingToken(9)
            }))
        );
        assert!(matches!(
            redis_fence_reply(&scope, token, (-1, "etcd".into())),
            Some(RedisFenceReply::Refused(Stale::OtherScope { .. }))
        ));
        assert_eq!(redis_fence_reply(&scope, token, (7, String::new())), None);
        let args = redis_fenced_set_args(&scope, FencingToken(u64::MAX), "v");
        assert_eq!(args[1], b"18446744073709551615");
    }
}
