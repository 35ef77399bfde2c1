//! The Lua scripts: every check-then-act on a lock is one atomic script.
//!
//! They are sent with `EVALSHA` (falling back to loading them once after a
//! server restart). Numbers that may exceed 14 digits are formatted with
//! `%d`, because Redis' Lua turns plain numbers into strings with `%.14g`.

use std::sync::LazyLock;

use redis::Script;

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

/// The server clock in milliseconds, and the queue's live head: waiters
/// whose entry has expired are dropped off the head first. `live_head`
/// returns the head (or false) and the time if it read it (or false).
const LIVE_HEAD: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function live_head(queue, waiters)
  local head = redis.call('LINDEX', queue, 0)
  local now = false
  while head do
    if not now then now = now_ms() end
    local expiry = redis.call('ZSCORE', waiters, head)
    if expiry and tonumber(expiry) > now then break end
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, head)
    head = redis.call('LINDEX', queue, 0)
  end
  return head, now
end
"#;

/// Drops dead waiters at the head of a free lock's queue, then serves the
/// first live one through its backend instance's channel
/// (`wake_prefix .. instance`):
///
/// - with `handoff`, the lock passes to it right here (owner and TTL are
///   part of its waiter id) and the message carries the fencing token, so
///   the waiter holds the lock without another round trip;
/// - without (elections, whose leader value the waiter writes), the message
///   only wakes it to run the acquire script.
const HAND_OVER: &str = r#"
local function hand_over(queue, waiters, wake_prefix, owner_key, fence, handoff)
  local head = live_head(queue, waiters)
  if not head then return end
  local instance, owner, ttl = string.match(head, '^([^/]*)/[^/]*/([^/]*)/(%d+)$')
  if handoff and instance then
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, head)
    redis.call('SET', owner_key, owner, 'PX', ttl)
    local token = next_token(fence)
    redis.call('PUBLISH', wake_prefix .. instance, head .. ' ' .. string.format('%d', token))
  else
    redis.call('PUBLISH', wake_prefix .. string.match(head, '^[^/]*'), head)
  end
end
"#;

/// Acquire, or join the queue.
///
/// KEYS: owner, fence, queue, waiters, and for elections leader.
/// ARGV: 1 owner id, 2 ttl ms (also the lease of a queue entry), 3 waiter id
/// (or ''), 4 flags: `q` join the queue, `f` honour the queue (single
/// server), `c` publish an election's leader record at once (Redlock
/// confirms it later); elections add 5 leader value, 6 leader channel.
///
/// Returns `{1, token}` when acquired, else `{0, wait_ms, fence}`: how long
/// until the holder's lease ends (or the queue head's entry expires), -1 or
/// -2 if unknown, and the fencing counter now. Any hand-over to us that
/// happens later carries a larger token; one with a token up to `fence` is
/// stale (its lease ran out before this script ran, or this script would
/// have found our key).
const ACQUIRE: &str = r#"
local owner_key, fence, queue, waiters, leader = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, waiter, flags = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = redis.call('GET', owner_key)
if current == owner then
  -- We already hold it: an earlier attempt of this acquisition got through
  -- but its reply was lost, a release handed the lock to us and its message
  -- was lost, or (Redlock) our key outlived a failed round here. Restart the
  -- lease now, so that validity counted from this request's sending never
  -- overestimates it, and take a new token: another holder's confirm round
  -- may have raised this fence to its own token since our key was set.
  redis.call('PEXPIRE', owner_key, ttl)
  redis.call('LREM', queue, 0, waiter)
  redis.call('ZREM', waiters, waiter)
  local token = next_token(fence)
  if leader and redis.call('HGET', leader, 'owner') == owner then
    local text = string.format('%d', token)
    redis.call('HSET', leader, 'token', text)
    redis.call('PEXPIRE', leader, ttl)
    if redis.call('HGET', leader, 'ok') == '1' then redis.call('PUBLISH', ARGV[6], text) end
  end
  return {1, token}
end
local now = false
local head = false
if string.find(flags, 'f', 1, true) then
  head, now = live_head(queue, waiters)
end
if not current and (not head or head == waiter) then
  redis.call('SET', owner_key, owner, 'PX', ttl)
  if head then
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, waiter)
  end
  local token = next_token(fence)
  if leader then
    local text = string.format('%d', token)
    local confirmed = string.find(flags, 'c', 1, true) and '1' or '0'
    redis.call('HSET', leader, 'owner', owner, 'token', text, 'value', ARGV[5], 'version', '0', 'ok', confirmed)
    redis.call('PEXPIRE', leader, ttl)
    if confirmed == '1' then redis.call('PUBLISH', ARGV[6], text) end
  end
  return {1, token}
end
if waiter ~= '' and string.find(flags, 'q', 1, true) then
  if not now then now = now_ms() end
  local lease = tonumber(ttl)
  if redis.call('ZADD', waiters, string.format('%d', now + lease), waiter) == 1 then
    redis.call('RPUSH', queue, waiter)
  end
  if redis.call('PTTL', queue) < lease then
    redis.call('PEXPIRE', queue, lease)
    redis.call('PEXPIRE', waiters, lease)
  end
  if not head then head = waiter end
end
local wait = redis.call('PTTL', owner_key)
if wait < 0 and head and head ~= waiter then
  wait = tonumber(redis.call('ZSCORE', waiters, head)) - now
end
return {0, wait, tonumber(redis.call('GET', fence) or '0')}
"#;

/// Release (owner-checked delete), or give up waiting, or both; then serve
/// the next waiter if the lock is free.
///
/// KEYS: owner, queue, waiters, fence, and for elections leader.
/// ARGV: 1 owner id, 2 waiter id (or ''), 3 wake prefix, 4 flags: `h` hand
/// the lock over to the next waiter, `r` publish on the released channel;
/// 5 released channel (or ''); elections add 6 leader channel.
///
/// Returns 1 if it deleted our lock, 0 if the lock was not ours (touching
/// nothing of anyone else's).
const RELEASE: &str = r#"
local freed = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed = 1
  if KEYS[5] then
    if redis.call('HGET', KEYS[5], 'owner') == ARGV[1] then redis.call('DEL', KEYS[5]) end
    redis.call('PUBLISH', ARGV[6], '0')
  end
end
local removed = 0
if ARGV[2] ~= '' then
  removed = redis.call('LREM', KEYS[2], 0, ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
end
if freed == 1 or (removed > 0 and redis.call('EXISTS', KEYS[1]) == 0) then
  hand_over(KEYS[2], KEYS[3], ARGV[3], KEYS[1], KEYS[4], string.find(ARGV[4], 'h', 1, true))
end
if freed == 1 and string.find(ARGV[4], 'r', 1, true) then redis.call('PUBLISH', ARGV[5], '1') end
return freed
"#;

/// Owner-checked `PEXPIRE`; never re-creates a key that is gone.
///
/// KEYS: owner, and for elections leader. ARGV: 1 owner id, 2 ttl ms.
/// Returns 1 if renewed.
const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] and redis.call('HGET', KEYS[2], 'owner') == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
"#;

/// Redlock: raise the fence to the quorum's token, and mark an election's
/// leader record as confirmed with that token.
///
/// KEYS: fence, owner, leader. ARGV: 1 token, 2 owner id, 3 election, 4 leader channel.
///
/// Returns 1 when this server now shows the confirmed leader record (always
/// for plain locks), 0 when it raised the fence but does not hold our
/// election record (it never granted us, or our key is already gone): such
/// a server must not count toward the quorum that makes the leader visible.
const CONFIRM: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
if ARGV[3] ~= '1' then return 1 end
if redis.call('GET', KEYS[2]) == ARGV[2] and redis.call('HGET', KEYS[3], 'owner') == ARGV[2] then
  redis.call('HSET', KEYS[3], 'token', ARGV[1], 'ok', '1')
  redis.call('PUBLISH', ARGV[4], ARGV[1])
  return 1
end
return 0
"#;

/// Publish a new leader value if we still lead.
///
/// KEYS: owner, leader. ARGV: 1 owner id, 2 value, 3 version, 4 leader channel.
const PROCLAIM: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[2], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'value', ARGV[2], 'version', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[3])
return 1
"#;

/// The current leader: nil, or `{owner, token, value, version}`.
///
/// KEYS: owner, leader.
const LEADER: &str = r#"
local owner = redis.call('GET', KEYS[1])
if not owner then return false end
local h = redis.call('HMGET', KEYS[2], 'owner', 'token', 'value', 'version', 'ok')
if h[1] ~= owner or h[5] ~= '1' then return false end
return {owner, h[2], h[3], h[4]}
"#;

/// All scripts, hashed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) confirm: Script,
    pub(crate) proclaim: Script,
    pub(crate) leader: Script,
}

impl Scripts {
    /// Every script, for loading them at connect.
    pub(crate) fn all(&self) -> [&Script; 6] {
        [
            &self.acquire,
            &self.release,
            &self.renew,
            &self.confirm,
            &self.proclaim,
            &self.leader,
        ]
    }
}

/// The scripts, shared by every backend in the process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(&format!("{NEXT_TOKEN}\n{LIVE_HEAD}\n{ACQUIRE}")),
    release: Script::new(&format!(
        "{NEXT_TOKEN}\n{LIVE_HEAD}\n{HAND_OVER}\n{RELEASE}"
    )),
    renew: Script::new(RENEW),
    confirm: Script::new(CONFIRM),
    proclaim: Script::new(PROCLAIM),
    leader: Script::new(LEADER),
});

#[cfg(test)]
mod tests {
    use super::*;
    use lock_testkit::servers::RedisServer;

    const KEYS: [&str; 4] = ["t:{x}:owner", "t:{x}:fence", "t:{x}:queue", "t:{x}:waiters"];

    async fn acquire(conn: &mut redis::aio::MultiplexedConnection, owner: &str) -> Vec<i64> {
        let mut call = SCRIPTS.acquire.prepare_invoke();
        for key in KEYS {
            call.key(key);
        }
        call.arg(owner).arg("5000").arg("").arg("");
        call.invoke_async(conn).await.expect("acquire script")
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
        let first = acquire(&mut conn, "ours").await;
        assert_eq!(first[0], 1, "{first:?}");
        let theirs = first[1] + 100;
        let confirmed: i64 = SCRIPTS
            .confirm
            .key(KEYS[1])
            .key(KEYS[0])
            .key("t:{x}:leader")
            .arg(theirs)
            .arg("theirs")
            .arg("0")
            .arg("")
            .invoke_async(&mut conn)
            .await
            .expect("confirm script");
        assert_eq!(confirmed, 1);
        let again = acquire(&mut conn, "ours").await;
        assert_eq!(again[0], 1, "{again:?}");
        assert!(
            again[1] > theirs,
            "token {} again, not above the confirmed {theirs}",
            again[1]
        );
    }
}
