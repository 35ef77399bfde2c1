//! Where a lock lives in Redis: its keys and channels.
//!
//! Every key of one lock embeds the name in a `{...}` hash tag, so they all
//! map to one Redis Cluster slot and one Lua script may touch them all:
//!
//! | key | holds |
//! |---|---|
//! | `<prefix>lock:{<name>}:owner` | the holder record: `<owner id> <token> <state> <since> <ttl> <about>`, with `PX ttl` (see the scripts' `HOLDER`) |
//! | `<prefix>lock:{<name>}:fence` | the fencing counter (never expires) |
//! | `<prefix>lock:{<name>}:queue` | waiter ids in arrival order (list) |
//! | `<prefix>lock:{<name>}:waiters` | waiter id → expiry in server ms (sorted set) |
//! | `<prefix>lock:{<name>}:labels` | waiter id → description (hash) |
//! | `<prefix>lock:{<name>}:revoked` | owner ids evicted by `force_release`, for a while (set) |
//! | `<prefix>lock:{<name>}:leader` | elections only: owner, token, value, version |
//!
//! Elections use the same layout under `<prefix>election:`. Semaphores
//! (`<prefix>semaphore:`) and read-write locks (`<prefix>rwlock:`) use the
//! fence and the queue keys (`queue`, `waiters`, `labels`) of that layout,
//! the owner key for a read-write lock's writer, and three keys of their own
//! (shown for semaphores; read-write locks have the first two):
//!
//! | key | holds |
//! |---|---|
//! | `<prefix>semaphore:{<name>}:holders` | permit holders (or readers) → lease expiry in server ms (sorted set) |
//! | `<prefix>semaphore:{<name>}:access` | queued waiter id → what it asks for: the permit limit, `read` or `write` (hash) |
//! | `<prefix>semaphore:{<name>}:limit` | the limit every live permit agrees on (never expires, like the fence) |
//!
//! Channels are not scoped by database in Redis, so their names carry the
//! database number.
//!
//! The plain layout (`layout=plain`) keeps a lock in one key,
//! `<prefix><name>`, the key redis-py's `Lock(name)`, go-redsync and
//! node-redlock use for that name, plus two keys only distlock reads:
//! `<prefix>distlock:plain:{<name>}:waiters` and `...:revoked` (see
//! `scripts/plain.rs`).

use distlock_core::LockName;
pub(crate) use distlock_core::raw::Space;

/// The key suffixes that mean a lock exists: it is held, or waited for.
const LIVE_SUFFIXES: [&str; 2] = [":owner", ":waiters"];

/// The key and channel layout of one backend (prefix and database).
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    prefix: String,
    channel_prefix: String,
    /// The plain layout: a lock is the key `<prefix><name>`.
    plain: bool,
}

impl KeySpace {
    pub(crate) fn new(prefix: &str, db: i64) -> Self {
        KeySpace {
            prefix: prefix.to_owned(),
            channel_prefix: format!("{prefix}db{db}:"),
            plain: false,
        }
    }

    /// The plain layout's keys under `prefix` (see the module docs).
    pub(crate) fn plain(prefix: &str, db: i64) -> Self {
        KeySpace {
            plain: true,
            ..KeySpace::new(prefix, db)
        }
    }

    /// The prefix of every key.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys and channels of one lock or election.
    pub(crate) fn of(&self, space: Space, name: &LockName) -> LockKeys {
        let mut keys = self.distlock_keys(space, name);
        if self.plain && space == Space::Lock {
            let own = format!("{}distlock:plain:{{{}}}", self.prefix, name.as_str());
            keys.owner = format!("{}{}", self.prefix, name.as_str());
            keys.waiters = format!("{own}:waiters");
            keys.revoked = format!("{own}:revoked");
        }
        keys
    }

    /// The keys and channels of one lock or election in the distlock layout.
    fn distlock_keys(&self, space: Space, name: &LockName) -> LockKeys {
        let base = format!("{}{}:{{{}}}", self.prefix, space.as_str(), name.as_str());
        let channel_base = format!(
            "{}{}:{{{}}}",
            self.channel_prefix,
            space.as_str(),
            name.as_str()
        );
        LockKeys {
            owner: format!("{base}:owner"),
            fence: format!("{base}:fence"),
            queue: format!("{base}:queue"),
            waiters: format!("{base}:waiters"),
            labels: format!("{base}:labels"),
            revoked: format!("{base}:revoked"),
            leader: format!("{base}:leader"),
            holders: format!("{base}:holders"),
            access: format!("{base}:access"),
            limit: format!("{base}:limit"),
            wake_prefix: self.wake_prefix(),
            released_channel: format!("{channel_base}:released"),
            leader_channel: format!("{channel_base}:leader"),
            space,
        }
    }

    /// The prefix of the per-instance wake-up channels; the release script
    /// appends the instance id taken from the waiter id.
    pub(crate) fn wake_prefix(&self) -> String {
        format!("{}wake:", self.channel_prefix)
    }

    /// The `SCAN MATCH` pattern of every key of every lock (or election)
    /// whose name starts with `name_prefix`.
    pub(crate) fn scan_pattern(&self, space: Space, name_prefix: &str) -> String {
        format!(
            "{}{}:{{{}*",
            glob_escape(&self.prefix),
            space.as_str(),
            glob_escape(name_prefix)
        )
    }

    /// The name of the lock that `key` (from a scan of `space`) shows to
    /// exist: held (`:owner`) or waited for (`:waiters`). Other keys (the
    /// fence, which outlives every lock) say nothing.
    pub(crate) fn live_name(&self, space: Space, key: &[u8]) -> Option<LockName> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(space.as_str())?
            .strip_prefix(":{")?;
        let name = LIVE_SUFFIXES
            .iter()
            .find_map(|suffix| rest.strip_suffix(suffix)?.strip_suffix('}'))?;
        LockName::new(name).ok()
    }
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The keys and channels of one lock or election.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    pub(crate) owner: String,
    pub(crate) fence: String,
    pub(crate) queue: String,
    pub(crate) waiters: String,
    /// Waiter id → description.
    pub(crate) labels: String,
    /// Owner ids recently evicted by `force_release`.
    pub(crate) revoked: String,
    pub(crate) leader: String,
    /// Shared primitives: permit holders or readers → expiry (server ms).
    pub(crate) holders: String,
    /// Shared primitives: queued waiter id → its access tag.
    pub(crate) access: String,
    /// Semaphores: the limit of the live permits.
    pub(crate) limit: String,
    /// The prefix of the per-instance wake-up channels, as
    /// [`KeySpace::wake_prefix`].
    pub(crate) wake_prefix: String,
    /// Published on every release (Redlock waiters listen here).
    pub(crate) released_channel: String,
    /// Published when an election's leader or value changes.
    pub(crate) leader_channel: String,
    pub(crate) space: Space,
}

impl LockKeys {
    /// Whether this is an election.
    pub(crate) fn is_election(&self) -> bool {
        self.space == Space::Election
    }

    /// The keys of the lock's state, as the acquire and inspect scripts
    /// take them.
    pub(crate) fn state(&self) -> [&str; 5] {
        [
            &self.owner,
            &self.fence,
            &self.queue,
            &self.waiters,
            &self.labels,
        ]
    }

    /// The keys of a shared primitive's state, as its acquire and release
    /// scripts take them.
    pub(crate) fn shared_state(&self) -> [&str; 8] {
        [
            &self.owner,
            &self.fence,
            &self.queue,
            &self.waiters,
            &self.labels,
            &self.holders,
            &self.access,
            &self.limit,
        ]
    }

    /// The same keys as the release and force-release scripts take them.
    pub(crate) fn release_order(&self) -> [&str; 5] {
        [
            &self.owner,
            &self.queue,
            &self.waiters,
            &self.fence,
            &self.labels,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::Access;

    /// The Redis Cluster hash tag of a key: the part between the first `{`
    /// and the next `}`, if non-empty.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open + 1..].find('}').unwrap() + open + 1;
        &key[open + 1..close]
    }

    #[test]
    fn all_keys_of_a_lock_share_one_hash_tag() {
        let space = KeySpace::new("app:", 0);
        for name in ["jobs/a", "we}ird{name", "ünï"] {
            let k = space.of(Space::Lock, &LockName::new(name).unwrap());
            let tag = hash_tag(&k.owner);
            assert!(!tag.is_empty());
            for key in [
                &k.fence, &k.queue, &k.waiters, &k.labels, &k.revoked, &k.leader, &k.holders,
                &k.access, &k.limit,
            ] {
                assert_eq!(hash_tag(key), tag, "{key}");
            }
        }
    }

    #[test]
    fn the_plain_layout_keeps_a_lock_in_the_key_of_its_name() {
        let name = LockName::new("jobs").unwrap();
        let bare = KeySpace::plain("", 0).of(Space::Lock, &name);
        assert_eq!(bare.owner, "jobs");
        assert_eq!(bare.waiters, "distlock:plain:{jobs}:waiters");
        assert_eq!(bare.revoked, "distlock:plain:{jobs}:revoked");
        let prefixed = KeySpace::plain("app:", 0).of(Space::Lock, &name);
        assert_eq!(prefixed.owner, "app:jobs");
        assert_eq!(prefixed.revoked, "app:distlock:plain:{jobs}:revoked");
    }

    #[test]
    fn locks_and_elections_do_not_collide() {
        let space = KeySpace::new("p:", 0);
        let name = LockName::new("x").unwrap();
        assert_ne!(
            space.of(Space::Lock, &name).owner,
            space.of(Space::Election, &name).owner
        );
    }

    #[test]
    fn shared_primitives_have_spaces_of_their_own() {
        let space = KeySpace::new("distlock:", 0);
        let name = LockName::new("jobs").unwrap();
        let semaphore = space.of(Space::shared(Access::permit(3).unwrap()), &name);
        let rwlock = space.of(Space::shared(Access::Read), &name);
        assert_eq!(semaphore.holders, "distlock:semaphore:{jobs}:holders");
        assert_eq!(rwlock.owner, "distlock:rwlock:{jobs}:owner");
        assert_eq!(Space::shared(Access::Write), Space::RwLock);
        assert_ne!(rwlock.fence, space.of(Space::Lock, &name).fence);
    }

    #[test]
    fn scanned_keys_give_back_the_names_of_live_locks() {
        let space = KeySpace::new("app:", 0);
        for text in ["jobs/a", "we}ird{name", "st*r?[x]\\"] {
            let name = LockName::new(text).unwrap();
            let k = space.of(Space::Lock, &name);
            for live in [&k.owner, &k.waiters] {
                assert_eq!(
                    space.live_name(Space::Lock, live.as_bytes()),
                    Some(name.clone())
                );
            }
            for other in [&k.fence, &k.queue, &k.labels, &k.revoked] {
                assert_eq!(
                    space.live_name(Space::Lock, other.as_bytes()),
                    None,
                    "{other}"
                );
            }
            assert_eq!(space.live_name(Space::Election, k.owner.as_bytes()), None);
        }
        assert_eq!(space.scan_pattern(Space::Lock, "a*b"), "app:lock:{a\\*b*");
    }
}
