//! Leader election on the same revision queue as the lock, as etcd's own
//! Election service works:
//! campaigning is acquiring with a value, the leader is the oldest key,
//! proclaiming rewrites our key if it is still ours, resigning releases.

use async_trait::async_trait;
use distlock_core::{
    Candidacy, ElectionBackend, FencingToken, LeaderInfo, LeaderStream, Leadership, LockName,
    Result,
};

use crate::backend::EtcdBackend;
use crate::keys::Space;
use crate::observe;
use crate::queue;

#[async_trait]
impl ElectionBackend for EtcdBackend {
    /// Joins the election's queue with `value` and waits to lead.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the candidacy: the candidate's lease is revoked
    /// in the background, which deletes its key.
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
        let guard = self.acquire_in(Space::Election, name, &bid.options, bid.value.clone());
        Ok(Leadership::new(guard.await?, bid.value))
    }

    /// The oldest key of the election's queue: one round trip.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let inner = self.inner();
        let queue = inner.keys.queue(Space::Election, name);
        let op = format!("read the leader of election {:?}", name.as_str());
        let resp = queue::read(inner, &op, &queue, queue::first_created()).await?;
        Ok(resp.kvs().first().map(|kv| LeaderInfo {
            value: kv.value().to_vec(),
            token: FencingToken(u64::try_from(kv.create_revision()).unwrap_or(0)),
            key: String::from_utf8_lossy(kv.key()).into_owned(),
        }))
    }

    /// Follows the election: the current leader, then every new leader and
    /// proclaimed value, in order, resuming after compaction. An error is
    /// yielded once; a retryable one is followed by more leaders, any other
    /// ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let inner = self.inner();
        let queue = inner.keys.queue(Space::Election, name);
        observe::follow(inner.rpc.clone(), queue, name.clone()).await
    }
}
