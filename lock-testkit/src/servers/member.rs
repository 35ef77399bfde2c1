//! What every launcher's server process can be made to do, so that code
//! striking a server (a fault runner, say) treats every kind alike, and
//! how a launcher hands out its servers.

use futures::future::BoxFuture;

use super::LaunchError;

/// One server process of a launcher: an [`EtcdMember`](super::EtcdMember),
/// a [`ZkMember`](super::ZkMember) or a [`RedisServer`](super::RedisServer).
/// Each also has these as inherent methods; the trait is for code that
/// holds any of them.
pub trait Member: Send + Sync {
    /// Kills the server with `SIGKILL` and waits until it is reaped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: `SIGKILL` goes out before the first await; a kill
    /// cancelled after that leaves the dead child unreaped.
    fn kill(&self) -> BoxFuture<'_, ()>;

    /// Kills the server if it runs, starts it again on the same ports and
    /// data directory, and waits until it serves.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the server is left down, or started but perhaps not yet
    /// serving.
    fn restart(&self) -> BoxFuture<'_, Result<(), LaunchError>>;

    /// Freezes the server with `SIGSTOP`.
    fn pause(&self);

    /// Unfreezes a paused server with `SIGCONT`.
    fn resume(&self);
}

/// Gives a launcher that keeps its servers in the `Vec` field `$field` the
/// accessors `$all()` (every server, in start order) and `$one(index)`.
macro_rules! member_list {
    ($launcher:ty, $field:ident: $member:ty, $all:ident, $one:ident) => {
        impl $launcher {
            /// All servers, in start order.
            pub fn $all(&self) -> &[$member] {
                &self.$field
            }

            /// The server at `index` (0-based, in start order).
            ///
            /// # Panics
            /// If `index` is out of range.
            pub fn $one(&self, index: usize) -> &$member {
                &self.$field[index]
            }
        }
    };
}
pub(crate) use member_list;
