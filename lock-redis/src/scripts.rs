//! The Lua scripts: every check-then-act on a lock is one atomic script.
//!
//! They are sent with `EVALSHA`, falling back to `EVAL` with the source
//! where the server does not have them cached (after a restart, or on a
//! replica promoted by a failover). Numbers that may exceed 14 digits are formatted with
//! `%d`, because Redis' Lua turns plain numbers into strings with `%.14g`.
//!
//! A lock's owner key holds its whole holder record as its value (see
//! [`HOLDER`]), so a grant is one `SET` and a release one `GET` and one
//! `DEL`: the hot path writes no key beside it but the fence.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

mod plain;
mod shared;

/// Seeds a missing fencing counter from the server clock in microseconds,
/// so tokens keep rising after Redis lost the counter, then increments it.
const NEXT_TOKEN: &str = r#"
local function next_token(fence)
  local token = redis.call('INCR', fence)
  if token == 1 then
    local t = redis.call('TIME')
    redis.call('SET', fence, t[1] .. string.format('%06d', tonumber(t[2])))
    token = redis.call('INCR', fence)
  end
  return token
end
"#;

/// The server clock in milliseconds.
const NOW: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#;

/// The holder record, the value of a held lock's owner key:
/// `<owner id> <token> <state> <since> <ttl> <about>`. `state` holds `c`
/// when the token is final (Redlock's confirm round sets it) and `w` when
/// somebody queued or registered as a waiter during this hold, so that the
/// release serves them; `-` when neither. `since` is the grant time in
/// server ms, `ttl` the lease asked for in ms, `about` the holder's
/// description (it may contain spaces: it comes last).
///
/// `state_of(final, waited)` makes a state, `is_final` and `was_waited`
/// read one; `holder_value` builds a record, `parse_holder` reads one back
/// (nothing for a value another writer left: then the key is held, but not
/// by a grant of ours); `ours(value, owner)` says whether `value` is
/// `owner`'s (owner ids are 32 hex digits, so a prefix is exact).
const HOLDER: &str = r#"
local function state_of(final, waited)
  local state = (final and 'c' or '') .. (waited and 'w' or '')
  if state == '' then return '-' end
  return state
end

local function is_final(state) return string.find(state, 'c', 1, true) ~= nil end

local function was_waited(state) return string.find(state, 'w', 1, true) ~= nil end

local function holder_value(owner, token, state, since, ttl, about)
  return owner .. ' ' .. string.format('%d', token) .. ' ' .. state .. ' ' ..
    string.format('%d', since) .. ' ' .. ttl .. ' ' .. about
end

local function parse_holder(value)
  if not value then return nil end
  return string.match(value, '^(%x+) (%d+) (%S+) (%d+) (%d+) (.*)$')
end

local function ours(value, owner)
  return value ~= false and owner ~= '' and string.sub(value, 1, #owner + 1) == owner .. ' '
end
"#;

/// The queue's live head: waiters whose entry has expired are dropped off
/// the head first (with their description and, for shared primitives,
/// their access tag in `access`; false for locks). `live_head` returns the
/// head (or false) and the time if it read it (or false).
const LIVE_HEAD: &str = r#"
local function live_head(queue, waiters, labels, access)
  local head = redis.call('LINDEX', queue, 0)
  local now = false
  while head do
    if not now then now = now_ms() end
    local expiry = redis.call('ZSCORE', waiters, head)
    if expiry and tonumber(expiry) > now then break end
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, head)
    redis.call('HDEL', labels, head)
    if access then redis.call('HDEL', access, head) end
    head = redis.call('LINDEX', queue, 0)
  end
  return head, now
end
"#;

/// Makes each of `keys` live at least `lease` ms more, so every key lives
/// as long as its longest-lived entry.
const KEEP_FOR: &str = r#"
local function keep_for(keys, lease)
  for _, key in ipairs(keys) do
    local left = redis.call('PTTL', key)
    if left ~= -2 and left < lease then redis.call('PEXPIRE', key, lease) end
  end
end
"#;

/// Serves the live waiters at the head of a shared primitive's queue,
/// oldest first, while `admit(owner, ttl, about, now, head)` lets them in:
/// it grants the head's owner id (taken, with the TTL, from its waiter id)
/// and returns the token, or returns false when the head must go on
/// waiting. Each admitted waiter gets `<waiter id> <token>` on its
/// instance's channel (`wake_prefix .. instance`), so it holds the grant
/// without another round trip; except `caller`, the script's own waiter
/// id, whose token `serve` returns instead (else false). A head whose id
/// is not ours to parse is only woken.
const SERVE: &str = r#"
local function serve(queue, waiters, labels, access, wake_prefix, admit, caller)
  local mine = false
  while true do
    local head, now = live_head(queue, waiters, labels, access)
    if not head then return mine end
    local instance, owner, ttl = string.match(head, '^([^/]*)/[^/]*/([^/]*)/(%d+)$')
    if not instance then
      redis.call('PUBLISH', wake_prefix .. string.match(head, '^[^/]*'), head)
      return mine
    end
    local token = admit(owner, ttl, redis.call('HGET', labels, head) or '', now, head)
    if not token then return mine end
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, head)
    redis.call('HDEL', labels, head)
    if access then redis.call('HDEL', access, head) end
    if head == caller then
      mine = token
    else
      redis.call('PUBLISH', wake_prefix .. instance, head .. ' ' .. string.format('%d', token))
    end
  end
end
"#;

/// Wakes one non-fair waiter of a lock that is free and has nobody live in
/// its queue: the live entry of the waiter set with the earliest expiry
/// (the one that last tried the longest ago). Non-fair waiters register in
/// the set but never queue, and every queued waiter is in the queue too,
/// so with the queue empty every live entry is a non-fair waiter's. The
/// entry is removed, so that the next release wakes another; the woken
/// waiter registers again if it loses the race. The message has no token:
/// it only says "try now".
const WAKE_RACER: &str = r#"
local function wake_racer(waiters, labels, wake_prefix, now)
  local racer = redis.call('ZRANGEBYSCORE', waiters, '(' .. string.format('%d', now or now_ms()), '+inf', 'LIMIT', 0, 1)[1]
  if not racer then return end
  redis.call('ZREM', waiters, racer)
  redis.call('HDEL', labels, racer)
  redis.call('PUBLISH', wake_prefix .. string.match(racer, '^[^/]*'), racer)
end
"#;

/// Serves the next waiter of a lock that is free: its owner key gone, or
/// (`replace`) still holding the record of the holder that just released
/// it, which a hand-over overwrites and anything else deletes. Dead
/// waiters at the head of its queue are dropped first, then
///
/// - with `handoff`, the lock passes to the live head right here (owner
///   and TTL are part of its waiter id) and the message carries the
///   fencing token, so the waiter holds the lock without another round
///   trip; its record says whether others still wait (queued, or
///   registered non-fair waiters of the same lock);
/// - without (elections, whose leader value the waiter writes), the
///   message only wakes it to run the acquire script.
///
/// With `racers` (not on Redlock, whose waiters listen on the released
/// channel), a lock with nobody live in its queue wakes one non-fair
/// waiter.
const HAND_OVER: &str = r#"
local function hand_over(queue, waiters, labels, wake_prefix, owner_key, fence, handoff, racers, replace)
  local head, now = live_head(queue, waiters, labels, false)
  local instance, owner, ttl
  if head then instance, owner, ttl = string.match(head, '^([^/]*)/[^/]*/([^/]*)/(%d+)$') end
  if not (head and handoff and instance) and replace then redis.call('DEL', owner_key) end
  if not head then
    if racers then wake_racer(waiters, labels, wake_prefix, now) end
    return
  end
  if not handoff or not instance then
    redis.call('PUBLISH', wake_prefix .. string.match(head, '^[^/]*'), head)
    return
  end
  local about = redis.call('HGET', labels, head) or ''
  redis.call('LPOP', queue)
  redis.call('ZREM', waiters, head)
  redis.call('HDEL', labels, head)
  local token = next_token(fence)
  local state = state_of(true, redis.call('EXISTS', waiters) == 1)
  redis.call('SET', owner_key, holder_value(owner, token, state, now, ttl, about), 'PX', ttl)
  redis.call('PUBLISH', wake_prefix .. instance, head .. ' ' .. string.format('%d', token))
end
"#;

/// Acquire, or join the queue.
///
/// KEYS: owner, fence, queue, waiters, labels, and for elections leader.
/// ARGV: 1 owner id, 2 ttl ms (also the lease of a queue entry), 3 waiter
/// id (or ''), 4 flags: `q` join the queue, `w` only register as a waiter,
/// outside the queue (non-fair and Redlock waiters, which race), `f`
/// honour the queue (single server), `c` the grant is final: publish an
/// election's leader record at once and mark the holder record's token
/// (Redlock confirms both later); 5 the holder description; elections add
/// 6 leader value, 7 leader channel.
///
/// Returns `{1, token}` when acquired, else `{0, wait_ms, fence}`: how long
/// until the holder's lease ends (or the queue head's entry expires), -1 or
/// -2 if unknown, and the fencing counter now. Any hand-over to us that
/// happens later carries a larger token; one with a token up to `fence` is
/// stale (its lease ran out before this script ran, or this script would
/// have found our key). Run again by the owner of a final grant (a late or
/// repeated attempt), it answers that grant's token.
///
/// A free lock with nobody queued ahead costs `LINDEX` (fair), `INCR`,
/// `TIME` and one `SET NX GET`; the token is taken before the `SET` so
/// that the value is written once, and one taken for a `SET` that found
/// the lock held is skipped (tokens only have to rise).
const ACQUIRE: &str = r#"
local owner_key, fence, queue, waiters, labels, leader = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local owner, ttl, waiter, flags, about = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local final = string.find(flags, 'c', 1, true) ~= nil
local fair = string.find(flags, 'f', 1, true)
local queued = string.find(flags, 'q', 1, true)
local now, head = false, false
if fair then
  head, now = live_head(queue, waiters, labels, false)
end
local current
local token = false
if not head or head == waiter then
  token = next_token(fence)
  now = now or now_ms()
  -- Whether the release must serve anyone after us: a waiter queued
  -- behind us, or a registered racer other than us. (A fair grant of a
  -- lock with nobody queued does not look for racers: a non-fair waiter
  -- of a lock that fair clients share then wakes by its own timer.)
  local others, registered = false, false
  if head then
    others = redis.call('ZCARD', waiters) > 1
  elseif not fair then
    for _, racer in ipairs(redis.call('ZRANGE', waiters, 0, 1)) do
      if racer == waiter then registered = true else others = true end
    end
  end
  local value = holder_value(owner, token, state_of(final, others), now, ttl, about)
  current = redis.call('SET', owner_key, value, 'NX', 'PX', ttl, 'GET')
  if not current then
    if head then redis.call('LPOP', queue) end
    if head or registered then
      redis.call('ZREM', waiters, waiter)
      redis.call('HDEL', labels, waiter)
    end
    if leader then
      local text = string.format('%d', token)
      redis.call('HSET', leader, 'owner', owner, 'token', text, 'value', ARGV[6], 'version', '0', 'ok', final and '1' or '0')
      redis.call('PEXPIRE', leader, ttl)
      if final then redis.call('PUBLISH', ARGV[7], text) end
    end
    return {1, token}
  end
else
  current = redis.call('GET', owner_key)
end
if ours(current, owner) then
  -- We already hold it: an earlier attempt of this acquisition got through
  -- but its reply was lost, this attempt arrived after its client gave up
  -- on it, a release handed the lock to us (its message lost, or already
  -- taken as the grant), or (Redlock) our key outlived a failed round here.
  -- Restart the lease now, so that validity counted from this request's
  -- sending never overestimates it.
  redis.call('LREM', queue, 0, waiter)
  redis.call('ZREM', waiters, waiter)
  redis.call('HDEL', labels, waiter)
  local _, held, state, since, _, held_about = parse_holder(current)
  if is_final(state) then
    -- A final grant keeps its token: the client may hold it already (from
    -- a hand-over message or an earlier reply), and the holder record must
    -- agree with it. Nobody else held the lock since, so it is still above
    -- every earlier holder's.
    redis.call('PEXPIRE', owner_key, ttl)
    if leader and redis.call('HGET', leader, 'owner') == owner then redis.call('PEXPIRE', leader, ttl) end
    return {1, tonumber(held)}
  end
  -- Not final (a Redlock round before its confirm): take a new token,
  -- since another holder's confirm round may have raised this fence to its
  -- own token since our key was set.
  token = token or next_token(fence)
  local value = holder_value(owner, token, state_of(final, was_waited(state)), since, ttl, held_about)
  redis.call('SET', owner_key, value, 'PX', ttl)
  if leader and redis.call('HGET', leader, 'owner') == owner then
    local text = string.format('%d', token)
    redis.call('HSET', leader, 'token', text)
    redis.call('PEXPIRE', leader, ttl)
    if redis.call('HGET', leader, 'ok') == '1' then redis.call('PUBLISH', ARGV[7], text) end
  end
  return {1, token}
end
if waiter ~= '' and (queued or string.find(flags, 'w', 1, true)) then
  if not now then now = now_ms() end
  local lease = tonumber(ttl)
  if redis.call('ZADD', waiters, string.format('%d', now + lease), waiter) == 1 then
    if queued then redis.call('RPUSH', queue, waiter) end
    redis.call('HSET', labels, waiter, about)
  end
  keep_for(queued and {queue, waiters, labels} or {waiters, labels}, lease)
  if queued and not head then head = waiter end
  -- Tell the holder's release that somebody waits.
  local holder, held, state, since, held_ttl, held_about = parse_holder(current)
  if holder and not was_waited(state) then
    local value = holder_value(holder, held, state_of(is_final(state), true), since, held_ttl, held_about)
    redis.call('SET', owner_key, value, 'KEEPTTL')
  end
end
local wait = redis.call('PTTL', owner_key)
if wait < 0 and head and head ~= waiter then
  wait = tonumber(redis.call('ZSCORE', waiters, head)) - now
end
return {0, wait, tonumber(redis.call('GET', fence) or '0')}
"#;

/// Release (owner-checked delete), or give up waiting, or both; then serve
/// the next waiter if the lock is free and somebody waited. A non-fair
/// waiter that gives up while the lock is free passes on the wake-up it
/// may have been sent.
///
/// KEYS: owner, queue, waiters, fence, labels, and for elections leader.
/// ARGV: 1 owner id, 2 waiter id (or ''), 3 wake prefix, 4 flags: `h` hand
/// the lock over to the next waiter, `r` publish on the released channel;
/// 5 released channel (or ''); elections add 6 leader channel.
///
/// Returns 1 if it deleted our lock, 0 if the lock was not ours (touching
/// nothing of anyone else's). A release that nobody waited for is one
/// `GET` and one `DEL`.
const RELEASE: &str = r#"
local freed, waited = 0, false
local current = redis.call('GET', KEYS[1])
if ours(current, ARGV[1]) then
  freed = 1
  local _, _, state = parse_holder(current)
  waited = not state or was_waited(state)
  -- A hand-over below overwrites the key instead.
  if not waited then redis.call('DEL', KEYS[1]) end
  if KEYS[6] then
    if redis.call('HGET', KEYS[6], 'owner') == ARGV[1] then redis.call('DEL', KEYS[6]) end
    redis.call('PUBLISH', ARGV[6], '0')
  end
end
local removed = 0
if ARGV[2] ~= '' then
  removed = redis.call('LREM', KEYS[2], 0, ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('HDEL', KEYS[5], ARGV[2])
end
local racers = not string.find(ARGV[4], 'r', 1, true)
local handoff = string.find(ARGV[4], 'h', 1, true)
if freed == 1 and waited then
  hand_over(KEYS[2], KEYS[3], KEYS[5], ARGV[3], KEYS[1], KEYS[4], handoff, racers, true)
elseif freed == 0 and (removed > 0 or (racers and ARGV[2] ~= '')) and redis.call('EXISTS', KEYS[1]) == 0 then
  hand_over(KEYS[2], KEYS[3], KEYS[5], ARGV[3], KEYS[1], KEYS[4], handoff, racers, false)
end
if freed == 1 and string.find(ARGV[4], 'r', 1, true) then redis.call('PUBLISH', ARGV[5], '1') end
return freed
"#;

/// Owner-checked `PEXPIRE` of the owner key (and an election's leader
/// record); never re-creates a key that is gone.
///
/// KEYS: owner, revoked, and for elections leader. ARGV: 1 owner id, 2 ttl
/// ms. Returns 1 if renewed, 0 if the lock is not ours, 2 if it is not ours
/// because it was broken (`revoked` names our owner id).
const RENEW: &str = r#"
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 2 end
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[3] and redis.call('HGET', KEYS[3], 'owner') == ARGV[1] then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 1
"#;

/// Redlock: raise the fence to the quorum's token, write it into our holder
/// record as final, and mark an election's leader record as confirmed with
/// it.
///
/// KEYS: fence, owner, leader. ARGV: 1 token, 2 owner id, 3 election, 4
/// leader channel.
///
/// Returns 1 when this server now shows the confirmed leader record (always
/// for plain locks), 0 when it raised the fence but does not hold our
/// election record (it never granted us, or our key is already gone): such
/// a server must not count toward the quorum that makes the leader visible.
const CONFIRM: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
local current = redis.call('GET', KEYS[2])
local mine = ours(current, ARGV[2])
if mine then
  local owner, _, state, since, ttl, about = parse_holder(current)
  redis.call('SET', KEYS[2], holder_value(owner, ARGV[1], state_of(true, was_waited(state)), since, ttl, about), 'KEEPTTL')
end
if ARGV[3] ~= '1' then return 1 end
if mine and redis.call('HGET', KEYS[3], 'owner') == ARGV[2] then
  redis.call('HSET', KEYS[3], 'token', ARGV[1], 'ok', '1')
  redis.call('PUBLISH', ARGV[4], ARGV[1])
  return 1
end
return 0
"#;

/// What an operator sees of one lock on this server, read atomically.
///
/// KEYS: owner, fence, queue, waiters, labels, and for elections leader.
///
/// Returns a flat list of strings: owner id ('' when free), token, grant
/// time in server ms ('' unknown), description (an election's leader
/// value, when its record is the holder's), `ok` ('1' when the token
/// is final), lease left in ms, then pairs of waiter id and description,
/// queued waiters first in queue order, then the others (Redlock's).
/// Expired waiter entries are skipped. A key another writer set (no
/// record of ours) shows its value as the owner and the fence as its
/// token.
const INSPECT: &str = r#"
local value = redis.call('GET', KEYS[1])
local now = now_ms()
local out
if value then
  local left = string.format('%d', redis.call('PTTL', KEYS[1]))
  local owner, token, state, since, _, about = parse_holder(value)
  if owner then
    out = {owner, token, since, about, is_final(state) and '1' or '0', left}
  else
    owner = value
    out = {value, redis.call('GET', KEYS[2]) or '0', '', '', '1', left}
  end
  if KEYS[6] then
    local v = redis.call('HMGET', KEYS[6], 'owner', 'value')
    if v[1] == owner and v[2] then out[4] = v[2] end
  end
else
  out = {'', '0', '', '', '0', '0'}
end
local seen = {}
local function add(waiter)
  if seen[waiter] then return end
  seen[waiter] = true
  local expiry = redis.call('ZSCORE', KEYS[4], waiter)
  if expiry and tonumber(expiry) > now then
    table.insert(out, waiter)
    table.insert(out, redis.call('HGET', KEYS[5], waiter) or '')
  end
end
for _, waiter in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do add(waiter) end
for _, waiter in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. string.format('%d', now), '+inf')) do add(waiter) end
return out
"#;

/// Breaks a lock: deletes its owner key whoever holds it, remembers the
/// evicted owner id in the `revoked` set (so its next renewal learns it
/// was broken, not merely expired), and serves the next waiter as a
/// release does. The fence is untouched, so the next grant's token is
/// higher.
///
/// KEYS: owner, queue, waiters, fence, labels, revoked, and for elections
/// leader. ARGV: 1 wake prefix, 2 flags as for release, 3 released channel
/// (or ''); elections add 4 leader channel. An election's leader record
/// goes with its owner, and observers are told.
///
/// Returns false when the lock was free, else what it was, as INSPECT
/// (without waiters; for an election, the leader's value as its about).
const FORCE_RELEASE: &str = r#"
local value = redis.call('GET', KEYS[1])
if not value then return false end
local left = redis.call('PTTL', KEYS[1])
local owner, token, state, since, ttl, about = parse_holder(value)
local out
if owner then
  out = {owner, token, since, about, is_final(state) and '1' or '0', string.format('%d', left)}
else
  owner = value
  out = {value, redis.call('GET', KEYS[4]) or '0', '', '', '1', string.format('%d', left)}
end
if KEYS[7] then
  local v = redis.call('HMGET', KEYS[7], 'owner', 'value')
  if v[1] == owner then
    if v[2] then out[4] = v[2] end
    redis.call('DEL', KEYS[7])
  end
end
redis.call('DEL', KEYS[1])
if KEYS[7] then redis.call('PUBLISH', ARGV[4], '0') end
-- Long enough for the evicted holder's next renewal: it renews every
-- TTL/3 while its lease is valid, and its lease ends within `left`.
local keep = math.max(2 * (tonumber(ttl) or 0), 2 * left, 1000)
redis.call('SADD', KEYS[6], owner)
if redis.call('PTTL', KEYS[6]) < keep then redis.call('PEXPIRE', KEYS[6], keep) end
hand_over(KEYS[2], KEYS[3], KEYS[5], ARGV[1], KEYS[1], KEYS[4], string.find(ARGV[2], 'h', 1, true), not string.find(ARGV[2], 'r', 1, true), false)
if string.find(ARGV[2], 'r', 1, true) then redis.call('PUBLISH', ARGV[3], '1') end
return out
"#;

/// Publish a new leader value if we still lead.
///
/// KEYS: owner, leader. ARGV: 1 owner id, 2 value, 3 version, 4 leader channel.
const PROCLAIM: &str = r#"
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
if redis.call('HGET', KEYS[2], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'value', ARGV[2], 'version', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[3])
return 1
"#;

/// The current leader: nil, or `{owner, token, value, version}`.
///
/// KEYS: owner, leader.
const LEADER: &str = r#"
local owner = parse_holder(redis.call('GET', KEYS[1]))
if not owner then return false end
local h = redis.call('HMGET', KEYS[2], 'owner', 'token', 'value', 'version', 'ok')
if h[1] ~= owner or h[5] ~= '1' then return false end
return {owner, h[2], h[3], h[4]}
"#;

/// Declares [`Scripts`], one field per script built from its source, and
/// [`Scripts::all`], from a single list.
macro_rules! scripts {
    ($($name:ident: $source:expr,)*) => {
        /// All scripts, hashed once.
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
            /// Each script's source by its SHA-1 hash.
            sources: HashMap<String, String>,
        }

        impl Scripts {
            fn new() -> Scripts {
                let mut sources = HashMap::new();
                $(
                    let source = String::from($source);
                    let $name = Script::new(&source);
                    sources.insert($name.get_hash().to_owned(), source);
                )*
                Scripts { $($name,)* sources }
            }

            /// Every script, for loading them at connect.
            pub(crate) fn all(&self) -> impl Iterator<Item = &Script> {
                [$(&self.$name),*].into_iter()
            }
        }
    };
}

impl Scripts {
    /// The source of `script`, one of ours, for `EVAL` where the server
    /// does not have it cached.
    pub(crate) fn source(&self, script: &Script) -> &str {
        &self.sources[script.get_hash()]
    }
}

/// `script` with the functions that serve the next waiter on a release.
fn serving(script: &str) -> String {
    format!("{NEXT_TOKEN}\n{NOW}\n{HOLDER}\n{LIVE_HEAD}\n{WAKE_RACER}\n{HAND_OVER}\n{script}")
}

/// `script` with the functions of a shared primitive's queue and holders.
fn sharing(script: &str) -> String {
    format!(
        "{NEXT_TOKEN}\n{NOW}\n{LIVE_HEAD}\n{KEEP_FOR}\n{SERVE}\n{}\n{script}",
        shared::HOLDERS
    )
}

/// `script` with the functions that read and write a holder record.
fn holding(script: &str) -> String {
    format!("{HOLDER}\n{script}")
}

scripts! {
    acquire: format!("{NEXT_TOKEN}\n{NOW}\n{HOLDER}\n{LIVE_HEAD}\n{KEEP_FOR}\n{ACQUIRE}"),
    release: serving(RELEASE),
    shared_acquire: sharing(shared::ACQUIRE),
    shared_release: sharing(shared::RELEASE),
    shared_renew: format!("{NOW}\n{KEEP_FOR}\n{}", shared::RENEW),
    renew: holding(RENEW),
    confirm: holding(CONFIRM),
    proclaim: holding(PROCLAIM),
    leader: holding(LEADER),
    inspect: format!("{NOW}\n{HOLDER}\n{INSPECT}"),
    force_release: serving(FORCE_RELEASE),
    plain_acquire: plain::owned(&format!("{NOW}\n{KEEP_FOR}\n{}", plain::ACQUIRE)),
    plain_release: plain::owned(plain::RELEASE),
    plain_renew: plain::RENEW,
    plain_inspect: format!("{NOW}\n{}", plain::INSPECT),
    plain_force_release: plain::FORCE_RELEASE,
}

/// The scripts, shared by every backend in the process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(Scripts::new);

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_testkit::servers::RedisServer;

    const OURS: &str = "0123456789abcdef0123456789abcdef";
    const THEIRS: &str = "fedcba9876543210fedcba9876543210";

    const KEYS: [&str; 5] = [
        "t:{x}:owner",
        "t:{x}:fence",
        "t:{x}:queue",
        "t:{x}:waiters",
        "t:{x}:labels",
    ];

    async fn acquire(conn: &mut redis::aio::MultiplexedConnection, owner: &str) -> Vec<i64> {
        acquire_with(conn, owner, "").await
    }

    async fn acquire_with(
        conn: &mut redis::aio::MultiplexedConnection,
        owner: &str,
        flags: &str,
    ) -> Vec<i64> {
        let mut call = SCRIPTS.acquire.prepare_invoke();
        for key in KEYS {
            call.key(key);
        }
        call.arg(owner).arg("5000").arg("").arg(flags).arg("test");
        call.invoke_async(conn).await.expect("acquire script")
    }

    /// Running the acquire script again for a final grant (a late or
    /// repeated attempt on one server) answers that grant's token, the one
    /// its holder record keeps. (The counter may have moved on: a token is
    /// taken before the `SET NX` finds the key, and dropped.)
    #[tokio::test]
    async fn acquire_again_of_a_final_grant_keeps_its_token() {
        let server = RedisServer::start()
            .await
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        let mut conn = redis::Client::open(server.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let first = acquire_with(&mut conn, OURS, "c").await;
        assert_eq!(first[0], 1, "{first:?}");
        let again = acquire_with(&mut conn, OURS, "c").await;
        assert_eq!(again, first);
        let record: String = redis::cmd("GET")
            .arg(KEYS[0])
            .query_async(&mut conn)
            .await
            .expect("GET owner");
        assert_eq!(
            record.split(' ').nth(1),
            Some(first[1].to_string().as_str()),
            "the record keeps the grant's token: {record:?}"
        );
    }

    /// Running the acquire script again while our key is still there (a
    /// Redlock round after one whose release failed on this server) takes a
    /// new token, above whatever the fence was raised to meanwhile: here a
    /// confirm of another holder's token.
    #[tokio::test]
    async fn acquire_again_takes_a_fresh_token() {
        let server = RedisServer::start()
            .await
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        let mut conn = redis::Client::open(server.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let first = acquire(&mut conn, OURS).await;
        assert_eq!(first[0], 1, "{first:?}");
        let theirs = first[1] + 100;
        let confirmed: i64 = SCRIPTS
            .confirm
            .key(KEYS[1])
            .key(KEYS[0])
            .key("t:{x}:leader")
            .key(KEYS[4])
            .arg(theirs)
            .arg(THEIRS)
            .arg("0")
            .arg("")
            .invoke_async(&mut conn)
            .await
            .expect("confirm script");
        assert_eq!(confirmed, 1);
        let again = acquire(&mut conn, OURS).await;
        assert_eq!(again[0], 1, "{again:?}");
        assert!(
            again[1] > theirs,
            "token {} again, not above the confirmed {theirs}",
            again[1]
        );
    }
}
