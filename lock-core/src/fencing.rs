//! Fencing tokens: the number a protected resource uses to reject stale holders.

use std::fmt;

/// A number handed out with every successful acquisition.
///
/// # Contract
///
/// For one lock name, tokens strictly increase across all holders over time:
/// if acquisition B starts after acquisition A was granted, then
/// `B.token() > A.token()`. This holds across lease expiry and takeover by
/// another client, which is exactly when a paused former holder may still try
/// to write.
///
/// A resource protected by the lock should remember the highest token it has
/// seen and reject writes that carry a lower one. That is what makes a lock
/// safe against process pauses and network delays; the lease alone is not.
///
/// How strong the guarantee is depends on the backend
/// ([`Capabilities::fencing`](crate::Capabilities::fencing)): etcd and
/// ZooKeeper derive tokens from their replicated log and never go back; Redis
/// can go back if it loses data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}
