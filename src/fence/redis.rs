//! [`REDIS_FENCED_SET`]: a compare-and-set script fencing a Redis key.

use distlock_core::FencingToken;

use super::{Stale, TokenScope};

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
/// token; see [`SqlFence`](super::SqlFence) for why.
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
pub fn redis_fenced_set() -> distlock_redis::redis::Script {
    distlock_redis::redis::Script::new(REDIS_FENCED_SET)
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
