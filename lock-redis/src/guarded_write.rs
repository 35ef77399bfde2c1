//! Guarded writes: a Lua script that commits a write only while a lock is
//! still held by the acquisition that asks, checked atomically with it.
//!
//! A lock's owner key holds the holder record: the holder's random owner
//! id, then the fencing token of the grant. The script reads it: the write
//! runs only if the owner key exists and its record carries our token. A
//! holder whose lease ran out, or whose lock was broken or taken over,
//! finds another token (or none) and writes nothing.
//!
//! Redis runs a script alone, so nothing can change between the check and
//! the write; this needs every key to live on the lock's server. On one
//! server that is any key of its database; on a Redis Cluster, keys that
//! share the lock's `{name}` hash tag. Redlock cannot: its lock is a
//! majority of servers, and no one of them can check that.

use std::sync::LazyLock;

use distlock_core::raw::Site;
use distlock_core::{Error, ErrorKind, LockGuard, Result};
use redis::{FromRedisValue, Script, Value};

use crate::endpoint::ScriptCall;
use crate::keys::Space;
use crate::servers::{Mode, Servers};

/// The check that runs before the caller's script. KEYS[1] is the lock's
/// owner key; ARGV[1] the guard's token.
/// Returns `{0}` when the lock is not ours; otherwise the caller's body
/// runs, with the remaining keys and arguments as its `KEYS` and `ARGV`,
/// and its result comes back as `{1, result}`.
const CHECK: &str = r#"
local record = redis.call('GET', KEYS[1])
if not record or string.match(record, '^%x+ (%d+) ') ~= ARGV[1] then return {0} end
local keys, argv = {}, {}
for i = 2, #KEYS do keys[#keys + 1] = KEYS[i] end
for i = 2, #ARGV do argv[#argv + 1] = ARGV[i] end
return {1, (function(KEYS, ARGV)
"#;

/// Closes the caller's body, which [`CHECK`] opened as a function.
const CLOSE: &str = "\nend)(keys, argv)}\n";

/// A Lua script that runs only while a lock is held: see
/// [`RedisBackend::guarded_eval`](crate::RedisBackend::guarded_eval).
///
/// Build it once and reuse it: the script is sent by its SHA-1 hash
/// (`EVALSHA`), with its source only when the server does not have it.
///
/// The body sees the keys and arguments given to `guarded_eval` as `KEYS`
/// and `ARGV`, as in any Redis script, and its return value is the result.
///
/// ```
/// let add = distlock_redis::GuardedScript::new(
///     "return redis.call('INCRBY', KEYS[1], ARGV[1])",
/// );
/// # let _ = add;
/// ```
#[derive(Debug, Clone)]
pub struct GuardedScript {
    script: Script,
    source: String,
}

impl GuardedScript {
    /// The guarded script whose body is `body`, Lua code that may `return`
    /// a value.
    pub fn new(body: &str) -> Self {
        let source = format!("{CHECK}{body}{CLOSE}");
        GuardedScript {
            script: Script::new(&source),
            source,
        }
    }
}

/// `SET KEYS[1] ARGV[1]`.
static SET: LazyLock<GuardedScript> =
    LazyLock::new(|| GuardedScript::new("return redis.call('SET', KEYS[1], ARGV[1])"));
/// `DEL KEYS[1]`.
static DEL: LazyLock<GuardedScript> =
    LazyLock::new(|| GuardedScript::new("return redis.call('DEL', KEYS[1])"));
/// Nothing: the check alone.
static CHECK_ONLY: LazyLock<GuardedScript> = LazyLock::new(|| GuardedScript::new("return 1"));

/// The lock key a guard's script checks: its owner key.
struct LockKeys {
    owner: String,
}

/// The keys of the exclusive lock or leadership `guard` holds on
/// `servers`; `InvalidConfig` for a guard of a semaphore or read-write
/// lock, or of another backend.
fn lock_keys(servers: &Servers, guard: &LockGuard, what: &str) -> Result<LockKeys> {
    for space in [Space::Lock, Space::Election] {
        let keys = servers.keys.of(space, guard.name());
        if keys.owner == guard.key() {
            return Ok(LockKeys { owner: keys.owner });
        }
    }
    Err(site(servers, what).error(
        ErrorKind::InvalidConfig,
        format_args!(
            "the guard's key {} is not the owner key of an exclusive lock or leadership on \
             this backend (prefix {:?}); guarded writes take a guard of a lock or an \
             election from this backend, not a semaphore permit, a read-write lock or \
             another backend's guard",
            guard.key(),
            servers.keys.prefix()
        ),
    ))
}

fn site<'a>(servers: &'a Servers, what: &'a str) -> Site<'a> {
    Site::new(
        servers.backend,
        servers.nodes.first().map_or("", |node| node.addr()),
        what,
    )
}

/// The hash tag of `key` as Redis Cluster computes it: between the first
/// `{` and the next `}`, if not empty; else `None` (the whole key hashes).
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// Refuses, on a Redis Cluster, keys that do not share the lock's hash tag:
/// they may live on another master, where the script cannot run.
fn check_slots(servers: &Servers, lock: &LockKeys, keys: &[&str], what: &str) -> Result<()> {
    if servers.mode != Mode::Cluster {
        return Ok(());
    }
    let tag = hash_tag(&lock.owner);
    let foreign: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|key| tag.is_none() || hash_tag(key) != tag)
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    Err(site(servers, what).error(
        ErrorKind::InvalidConfig,
        format_args!(
            "key(s) {} do not share the lock's hash tag {{{}}}: on a Redis Cluster a guarded \
             write runs as one script on the master of the lock's slot, so it can only touch \
             keys of that slot; name them with the same tag, e.g. \"app:{{{}}}:data\"",
            foreign.join(", "),
            tag.unwrap_or(""),
            tag.unwrap_or("")
        ),
    ))
}

/// Refuses keys of distlock's own state (`<prefix>lock:{...}`, elections,
/// semaphores, read-write locks): a guarded write there could overwrite
/// the very owner key it checks.
fn check_not_lock_state(servers: &Servers, keys: &[&str], what: &str) -> Result<()> {
    let prefix = servers.keys.prefix();
    let ours: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|key| {
            key.strip_prefix(prefix).is_some_and(|rest| {
                ["lock:{", "election:{", "semaphore:{", "rwlock:{"]
                    .iter()
                    .any(|space| rest.starts_with(space))
            })
        })
        .collect();
    if ours.is_empty() {
        return Ok(());
    }
    Err(site(servers, what).error(
        ErrorKind::InvalidConfig,
        format_args!(
            "key(s) {} hold distlock's own lock state (prefix {prefix:?}); a guarded write \
             must not change the lock it is guarded by: write your data under other keys",
            ours.join(", ")
        ),
    ))
}

/// Runs `script` with `keys` and `args` only while `guard` holds its lock.
/// `Ok(None)` when the server found the lock gone or someone else's.
async fn run(
    servers: &Servers,
    guard: &LockGuard,
    script: &GuardedScript,
    keys: &[&str],
    args: &[&[u8]],
    what: &str,
) -> Result<Option<Value>> {
    if servers.layout == crate::Layout::Plain {
        return Err(crate::plain::lacks(
            "guarded writes: its key holds only the holder's value, which other clients do not keep in step with a token",
        ));
    }
    if !servers.mode.is_one_node() {
        return Err(site(servers, what).error(
            ErrorKind::Unsupported,
            "Redlock has no guarded writes: its lock is held on a majority of independent \
             servers, and no single server can check that majority atomically with a write; \
             pass the fencing token to the storage you write to (distlock::fence)",
        ));
    }
    let lock = lock_keys(servers, guard, what)?;
    check_not_lock_state(servers, keys, what)?;
    check_slots(servers, &lock, keys, what)?;
    if !guard.is_held() {
        return Err(lost(servers, guard, what));
    }
    let token = guard.token().to_string();
    let mut all_keys = vec![lock.owner.as_str()];
    all_keys.extend_from_slice(keys);
    let mut all_args = vec![token.as_bytes()];
    all_args.extend_from_slice(args);
    let call = ScriptCall::with_source(&script.script, &script.source, &all_keys, &all_args);
    let reply = servers.nodes[0].eval_call(&call, what).await?;
    match reply {
        Value::Array(mut fields) if !fields.is_empty() => {
            let done = i64::from_redis_value(fields[0].clone()).unwrap_or(0) == 1;
            if !done {
                return Ok(None);
            }
            Ok(Some(if fields.len() > 1 {
                fields.swap_remove(1)
            } else {
                Value::Nil
            }))
        }
        other => Err(site(servers, what).error(
            ErrorKind::Backend,
            format_args!("unexpected reply {other:?} from the guarded-write script"),
        )),
    }
}

fn lost(servers: &Servers, guard: &LockGuard, what: &str) -> Error {
    site(servers, what).error(
        ErrorKind::LeaseLost,
        format_args!(
            "lock {} (token {}) is no longer held by this acquisition (its lease ran out, or \
             it was broken or taken over); nothing was written",
            guard.name(),
            guard.token()
        ),
    )
}

/// Runs `script` under `guard` and converts its result to `T`.
pub(crate) async fn eval<T: FromRedisValue>(
    servers: &Servers,
    guard: &LockGuard,
    script: &GuardedScript,
    keys: &[&str],
    args: &[&[u8]],
) -> Result<T> {
    let what = format!(
        "guarded write of {} under lock {}",
        keys.join(","),
        guard.name()
    );
    match run(servers, guard, script, keys, args, &what).await? {
        None => Err(lost(servers, guard, &what)),
        Some(value) => T::from_redis_value(value).map_err(|e| {
            site(servers, &what).error(
                ErrorKind::Backend,
                format_args!("the script's result does not convert to the type asked for: {e}"),
            )
        }),
    }
}

/// `SET key value` under `guard`.
pub(crate) async fn put(
    servers: &Servers,
    guard: &LockGuard,
    key: &str,
    value: &[u8],
) -> Result<()> {
    eval::<Value>(servers, guard, &SET, &[key], &[value])
        .await
        .map(drop)
}

/// `DEL key` under `guard`; whether the key existed.
pub(crate) async fn delete(servers: &Servers, guard: &LockGuard, key: &str) -> Result<bool> {
    eval::<i64>(servers, guard, &DEL, &[key], &[])
        .await
        .map(|n| n > 0)
}

/// Whether the server still shows `guard` as the holder of its lock.
pub(crate) async fn is_owner(servers: &Servers, guard: &LockGuard) -> Result<bool> {
    let what = format!("checking the owner of lock {}", guard.name());
    match run(servers, guard, &CHECK_ONLY, &[], &[], &what).await {
        Ok(reply) => Ok(reply.is_some()),
        Err(e) if e.kind() == ErrorKind::LeaseLost => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_follow_the_cluster_rule() {
        assert_eq!(hash_tag("app:lock:{jobs}:owner"), Some("jobs"));
        assert_eq!(hash_tag("{jobs}:data"), Some("jobs"));
        assert_eq!(hash_tag("x{}y{z}"), None);
        assert_eq!(hash_tag("plain"), None);
        assert_eq!(hash_tag("a{we}ird{name}"), Some("we"));
    }
}
