//! What an observe stream yields: only a leader newer than the last one.
//!
//! Backends learn of leaders by re-reading, by watch events, or by both, so
//! the same leader often arrives twice, and a slow read can return an older
//! one. Every backend's stream passes what it reads through one
//! [`LeaderFilter`], so all of them keep the
//! [`ElectionBackend`](crate::ElectionBackend) contract the same way.

use crate::election::LeaderInfo;
use crate::fencing::FencingToken;

/// Remembers the last leader an observe stream yielded, and admits only a
/// later one: a higher token, or the same token with another value.
///
/// Re-proclaiming the value already published is therefore not yielded
/// again, and a leader never follows one with a higher token.
#[derive(Debug, Clone, Default)]
pub struct LeaderFilter {
    last: Option<(FencingToken, Vec<u8>)>,
}

impl LeaderFilter {
    /// A filter that has yielded nothing yet: it admits any first leader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `leader` is to be yielded; if so it becomes the last one.
    pub fn admit(&mut self, leader: &LeaderInfo) -> bool {
        let newer = match &self.last {
            None => true,
            Some((token, value)) => {
                leader.token > *token || (leader.token == *token && leader.value != *value)
            }
        };
        if newer {
            self.last = Some((leader.token, leader.value.clone()));
        }
        newer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(token: u64, value: &str) -> LeaderInfo {
        LeaderInfo {
            value: value.as_bytes().to_vec(),
            token: FencingToken(token),
            key: format!("k{token}"),
        }
    }

    #[test]
    fn admits_later_leaders_and_new_values_only() {
        let mut filter = LeaderFilter::new();
        assert!(filter.admit(&leader(5, "a")));
        assert!(!filter.admit(&leader(5, "a")), "the same leader again");
        assert!(filter.admit(&leader(5, "b")), "a new value");
        assert!(filter.admit(&leader(5, "a")), "back to the first value");
        assert!(!filter.admit(&leader(4, "z")), "an older leader");
        assert!(filter.admit(&leader(6, "a")), "a later leader, same value");
    }
}
