//! The scripts of the plain layout: one key per lock, `<prefix><name>`,
//! holding the holder's value with `PX ttl`, exactly as redis-py's `Lock`,
//! go-redsync and node-redlock keep it, so each side's owner checks see
//! the other's key as someone else's.
//!
//! distlock's value is `<id>.<token>.<description>`: `id` 32 random hex
//! digits, new per acquisition (as unguessable as redis-py's uuid hex);
//! `token` the server clock in microseconds when the key was set; then the
//! holder description. Other clients compare values for equality only, so
//! the form is ours to read back (`inspect`), and a value of theirs never
//! starts with `<our id>.`.
//!
//! Two keys of distlock's own sit beside it, never read by the other
//! clients: `waiters` (distlock waiter ids → expiry in server ms, so
//! `inspect` can count them) and `revoked` (values evicted by
//! `force_release`, for a while, so the evicted guard learns why).

/// Whether `value` is the one of the acquisition `id` (its full value, or
/// `<id>.` and anything after: a grant whose reply was lost).
const OURS: &str = r#"
local function ours(value, id)
  return value ~= false and (value == id or string.sub(value, 1, #id + 1) == id .. '.')
end
"#;

/// Take the lock, or register as a waiter.
///
/// KEYS: lock, waiters. ARGV: 1 id, 2 ttl ms, 3 description, 4 waiter id
/// ('' when not waiting).
///
/// Returns `{1, value}` when we hold the lock (newly set with `SET NX PX`,
/// or already ours: an earlier attempt's reply was lost, and its lease is
/// restarted now), else `{0, pttl}`: the holder's lease left in ms (-1
/// for a key without expiry).
pub(super) const ACQUIRE: &str = r#"
local lock, waiters = KEYS[1], KEYS[2]
local id, ttl, about, waiter = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = redis.call('GET', lock)
local function granted(value)
  if waiter ~= '' then redis.call('ZREM', waiters, waiter) end
  return {1, value}
end
if ours(current, id) then
  redis.call('PEXPIRE', lock, ttl)
  return granted(current)
end
if not current then
  local t = redis.call('TIME')
  local value = id .. '.' .. t[1] .. string.format('%06d', tonumber(t[2])) .. '.' .. about
  redis.call('SET', lock, value, 'NX', 'PX', ttl)
  return granted(value)
end
if waiter ~= '' then
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', string.format('%d', now))
  redis.call('ZADD', waiters, string.format('%d', now + tonumber(ttl)), waiter)
  keep_for({waiters}, tonumber(ttl))
end
return {0, string.format('%d', redis.call('PTTL', lock))}
"#;

/// Owner-checked delete (redis-py's release: compare, then `DEL`), and
/// removal of a waiter entry.
///
/// KEYS: lock, waiters. ARGV: 1 our value or id, 2 waiter id (or '').
/// Returns 1 if it deleted our key, else 0, touching nobody else's.
pub(super) const RELEASE: &str = r#"
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[2], ARGV[2]) end
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

/// Owner-checked `PEXPIRE` (redis-py's reacquire: compare, then set the
/// TTL anew); never re-creates a key that is gone.
///
/// KEYS: lock, revoked. ARGV: 1 our value, 2 ttl ms. Returns 1 if renewed,
/// 0 if the key is not ours, 2 if it is not ours because it was broken.
pub(super) const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 2 end
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// What an operator sees: `{value, pttl, live waiters}`, value '' when
/// free.
///
/// KEYS: lock, waiters.
pub(super) const INSPECT: &str = r#"
local value = redis.call('GET', KEYS[1])
local now = string.format('%d', now_ms())
local waiting = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
if not value then return {'', '0', string.format('%d', waiting)} end
return {value, string.format('%d', redis.call('PTTL', KEYS[1])), string.format('%d', waiting)}
"#;

/// Breaks the lock whoever holds it (distlock or another client): deletes
/// the key and remembers its value in `revoked` long enough for the
/// evicted holder's next renewal (it renews every TTL/3 while its lease,
/// at most `pttl` more, is valid).
///
/// KEYS: lock, revoked. Returns false when free, else `{value, pttl}`.
pub(super) const FORCE_RELEASE: &str = r#"
local value = redis.call('GET', KEYS[1])
if not value then return false end
local left = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SADD', KEYS[2], value)
local keep = math.max(2 * left, 1000)
if redis.call('PTTL', KEYS[2]) < keep then redis.call('PEXPIRE', KEYS[2], keep) end
return {value, string.format('%d', left)}
"#;

/// `script` with the function that recognises our values.
pub(super) fn owned(script: &str) -> String {
    format!("{OURS}\n{script}")
}
