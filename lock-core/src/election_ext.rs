//! Leader election with names as strings, as [`LockBackendExt`](crate::LockBackendExt)
//! does for locks, and a leader stream that needs no `futures` import.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::{Stream, StreamExt};

use crate::election::{Candidacy, ElectionBackend, LeaderInfo, LeaderStream, Leadership};
use crate::error::Result;
use crate::name::LockName;
use crate::options::AcquireOptions;

/// Convenience methods for every [`ElectionBackend`]: names as `&str`,
/// checked before any I/O (`InvalidName`), values as anything that turns
/// into bytes, and default options.
///
/// Its names differ from [`ElectionBackend`]'s (`elect` next to `campaign`,
/// as `lock` stands next to `acquire`), so both traits can be in scope.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// use distlock_core::{ElectionBackendExt, memory::MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let mut leaders = backend.follow("jobs/leader").await?;
/// let leadership = backend.elect("jobs/leader", "node-1").await?;
/// assert_eq!(leaders.next().await.unwrap()?.value, b"node-1");
/// assert_eq!(backend.leader_of("jobs/leader").await?.unwrap().value_lossy(), "node-1");
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait ElectionBackendExt: ElectionBackend {
    /// Waits until this client leads `name`, then publishes `value`.
    ///
    /// # Cancel safety
    ///
    /// As [`ElectionBackend::campaign`]: cancelling gives up the candidacy.
    async fn elect(&self, name: &str, value: impl Into<Vec<u8>> + Send) -> Result<Leadership> {
        self.elect_with(name, value, &AcquireOptions::new()).await
    }

    /// [`elect`](Self::elect) with a TTL or a bound on the wait.
    ///
    /// # Cancel safety
    ///
    /// As [`ElectionBackend::campaign`]: cancelling gives up the candidacy.
    async fn elect_with(
        &self,
        name: &str,
        value: impl Into<Vec<u8>> + Send,
        options: &AcquireOptions,
    ) -> Result<Leadership> {
        let name = LockName::new(name)?;
        self.campaign(&name, Candidacy::new(value).with_options(options.clone()))
            .await
    }

    /// The current leader of `name`, if there is one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader_of(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let name = LockName::new(name)?;
        self.leader(&name).await
    }

    /// Follows the leaders of `name`, as [`ElectionBackend::observe`] does.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the [`Leaders`] stops observing.
    async fn follow(&self, name: &str) -> Result<Leaders> {
        let name = LockName::new(name)?;
        Ok(Leaders::new(self.observe(&name).await?))
    }
}

impl<T: ElectionBackend + ?Sized> ElectionBackendExt for T {}

/// The leaders of one election, in order, from [`ElectionBackendExt::follow`].
///
/// Read it with the inherent [`next`](Self::next); it is also a
/// [`futures::Stream`] for those who combine streams.
pub struct Leaders {
    inner: LeaderStream,
}

impl fmt::Debug for Leaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leaders").finish_non_exhaustive()
    }
}

impl Leaders {
    /// Wraps a stream from [`ElectionBackend::observe`].
    pub fn new(inner: LeaderStream) -> Self {
        Leaders { inner }
    }

    /// The next leader, or an error; `None` once the backend stops
    /// reporting. A retryable error ([`Error::is_retryable`](crate::Error::is_retryable))
    /// is followed by more leaders; after any other the next call returns
    /// `None`, as [`ElectionBackend::observe`] documents.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled call loses no leader, the next call returns it.
    pub async fn next(&mut self) -> Option<Result<LeaderInfo>> {
        self.inner.next().await
    }

    /// The underlying stream.
    pub fn into_stream(self) -> LeaderStream {
        self.inner
    }
}

impl Stream for Leaders {
    type Item = Result<LeaderInfo>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::MemoryBackend;
    use crate::{
        Candidacy, ElectionBackend, ElectionBackendExt, LockBackend, LockBackendExt, LockName,
    };

    /// All four traits in scope at once: each call resolves to one method
    /// (`capabilities` comes from `LockBackend` alone), and the string forms
    /// stand next to the `LockName` ones.
    #[tokio::test]
    async fn every_election_and_lock_trait_can_be_in_scope_at_once() {
        let backend = MemoryBackend::new();
        assert!(backend.capabilities().election);
        let name = LockName::new("scope/leader").unwrap();
        let leadership = backend.campaign(&name, Candidacy::new("a")).await.unwrap();
        assert_eq!(
            backend.leader_of("scope/leader").await.unwrap(),
            backend.leader(&name).await.unwrap()
        );
        leadership.resign().await.unwrap();
        let second = backend.elect("scope/leader", "b").await.unwrap();
        assert_eq!(second.value(), b"b");
        second.resign().await.unwrap();
        backend
            .try_lock("scope/lock")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
}
