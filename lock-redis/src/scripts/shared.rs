//! The scripts of semaphores and read-write locks.
//!
//! Both are one FIFO queue (the lock's `queue`, `waiters` and `labels`,
//! served by `serve`) in front of their holders: permits and readers in the
//! `holders` sorted set scored by their lease's expiry (server time), so a
//! dead holder's place frees itself; a writer in the `owner` key with `PX`,
//! as a lock's holder. Each queued waiter's access tag (the permit limit,
//! `read` or `write`) is in the `access` hash.
//!
//! The queue is served from its head only, while the head fits beside the
//! holders. That is `distlock_core::raw::blockers` for a queue whose head
//! entries are granted first: a permit is granted while fewer than its
//! limit hold one (so fewer than the limit are ahead of it), a writer when
//! nobody holds the lock and nobody is queued ahead, a reader when no
//! writer holds the lock and nobody is queued ahead (a queued head that
//! does not fit is a writer or a permit beyond the limit). So a reader
//! arriving after a waiting writer waits behind it, and nobody starves.
//!
//! Every grant of a name, whatever its access, takes its token from the
//! name's fence with `next_token`, in grant order.
//!
//! The state keys, in this order (`LockKeys::shared_state`): owner, fence,
//! queue, waiters, labels, holders, access, limit.

/// Functions over a shared primitive's state: `shared_keys` names the
/// state keys, `drop_expired` forgets holders whose lease ran out, `fits`
/// says whether an access tag fits beside the holders now, `admit` grants
/// one, and `serve_shared` serves the queue with them.
pub(super) const HOLDERS: &str = r#"
local function shared_keys()
  return {owner = KEYS[1], fence = KEYS[2], queue = KEYS[3], waiters = KEYS[4],
    labels = KEYS[5], holders = KEYS[6], access = KEYS[7], limit = KEYS[8]}
end

local function drop_expired(k, now)
  redis.call('ZREMRANGEBYSCORE', k.holders, '-inf', string.format('%d', now))
end

local function fits(k, tag)
  if tag == 'write' then
    return redis.call('EXISTS', k.owner) == 0 and redis.call('ZCARD', k.holders) == 0
  end
  if tag == 'read' then return redis.call('EXISTS', k.owner) == 0 end
  local limit = tonumber(tag)
  return limit ~= nil and redis.call('ZCARD', k.holders) < limit
end

local function admit(k, owner, tag, ttl, now)
  if tag == 'write' then
    redis.call('SET', k.owner, owner, 'PX', ttl)
  else
    redis.call('ZADD', k.holders, string.format('%d', now + tonumber(ttl)), owner)
    keep_for({k.holders}, tonumber(ttl))
  end
  return next_token(k.fence)
end

local function serve_shared(k, wake_prefix, caller)
  return serve(k.queue, k.waiters, k.labels, k.access, wake_prefix, function(owner, ttl, _, now, head)
    local tag = redis.call('HGET', k.access, head)
    if not tag or not fits(k, tag) then return false end
    return admit(k, owner, tag, ttl, now)
  end, caller)
end

local function forget_waiter(k, waiter)
  if waiter == '' then return end
  redis.call('LREM', k.queue, 0, waiter)
  redis.call('ZREM', k.waiters, waiter)
  redis.call('HDEL', k.labels, waiter)
  redis.call('HDEL', k.access, waiter)
end
"#;

/// Acquire a permit, the read side or the write side, or join the queue.
///
/// ARGV: 1 owner id, 2 ttl ms (also the lease of a queue entry), 3 waiter
/// id (or ''), 4 flags: `q` join the queue; 5 the holder description, 6
/// the access tag: the permit limit, `read` or `write`; 7 wake prefix.
///
/// Returns `{1, token}` when granted, `{0, wait_ms, fence}` when not (as
/// the lock's acquire script: how long until the first holder's lease
/// ends, -1 if unknown, and the fence now), or `{2, limit}` when permits
/// with another limit are held or queued (and nothing was touched).
pub(super) const ACQUIRE: &str = r#"
local k = shared_keys()
local owner, ttl, waiter, flags, about, tag, wake_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local lease = tonumber(ttl)
local now = now_ms()
drop_expired(k, now)
-- Granted already: a reply or a hand-over message was lost. Restart the
-- lease from this request, and take a new token, as the lock does.
if redis.call('GET', k.owner) == owner then
  redis.call('PEXPIRE', k.owner, ttl)
  forget_waiter(k, waiter)
  return {1, next_token(k.fence)}
end
if redis.call('ZSCORE', k.holders, owner) then
  redis.call('ZADD', k.holders, string.format('%d', now + lease), owner)
  keep_for({k.holders}, lease)
  forget_waiter(k, waiter)
  return {1, next_token(k.fence)}
end
-- Every live permit, held or queued, agrees on the limit; the record is
-- only taken as the limit while there is one.
if tonumber(tag) then
  local head = live_head(k.queue, k.waiters, k.labels, k.access)
  if head or redis.call('ZCARD', k.holders) > 0 then
    local theirs = redis.call('GET', k.limit)
    if theirs and theirs ~= tag then return {2, tonumber(theirs)} end
  end
  redis.call('SET', k.limit, tag)
end
local mine = serve_shared(k, wake_prefix, waiter)
if mine then return {1, mine} end
if not redis.call('LINDEX', k.queue, 0) and fits(k, tag) then
  forget_waiter(k, waiter)
  return {1, admit(k, owner, tag, ttl, now)}
end
if waiter ~= '' and string.find(flags, 'q', 1, true) then
  if redis.call('ZADD', k.waiters, string.format('%d', now + lease), waiter) == 1 then
    redis.call('RPUSH', k.queue, waiter)
  end
  redis.call('HSET', k.labels, waiter, about)
  redis.call('HSET', k.access, waiter, tag)
  keep_for({k.queue, k.waiters, k.labels, k.access}, lease)
end
local wait = redis.call('PTTL', k.owner)
local first = redis.call('ZRANGE', k.holders, 0, 0, 'WITHSCORES')
if first[2] then
  local left = tonumber(first[2]) - now
  if wait < 0 or left < wait then wait = left end
end
return {0, wait, tonumber(redis.call('GET', k.fence) or '0')}
"#;

/// Release a permit, a read or the write side (owner-checked), or give up
/// waiting, or both; then serve the queue from its head.
///
/// ARGV: 1 owner id, 2 waiter id (or ''), 3 wake prefix.
///
/// Returns 1 if it ended our live grant, 0 if we held nothing (a permit
/// or read whose lease had run out is removed, and counts as not held).
pub(super) const RELEASE: &str = r#"
local k = shared_keys()
local owner, waiter, wake_prefix = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
local freed = 0
if redis.call('GET', k.owner) == owner then
  redis.call('DEL', k.owner)
  freed = 1
else
  local expiry = redis.call('ZSCORE', k.holders, owner)
  if expiry then
    redis.call('ZREM', k.holders, owner)
    if tonumber(expiry) > now then freed = 1 end
  end
end
forget_waiter(k, waiter)
drop_expired(k, now)
serve_shared(k, wake_prefix, '')
return freed
"#;

/// Owner-checked renewal of a permit, a read or the write side; never
/// brings back a grant whose lease has run out.
///
/// KEYS: owner, holders. ARGV: 1 owner id, 2 ttl ms. Returns 1 if renewed,
/// 0 if not ours.
pub(super) const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expiry or tonumber(expiry) <= now then return 0 end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', string.format('%d', now + lease), ARGV[1])
keep_for({KEYS[2]}, lease)
return 1
"#;
