//! Leader election on the in-memory backend: a lock in its own key space
//! whose holder publishes a value.

use async_trait::async_trait;
use futures::StreamExt;
use tokio_stream::wrappers::WatchStream;

use super::MemoryBackend;
use super::table::Space;
use crate::access::Access;
use crate::election::{Candidacy, ElectionBackend, LeaderInfo, LeaderStream, Leadership};
use crate::error::Result;
use crate::leader_filter::LeaderFilter;
use crate::name::LockName;

#[async_trait]
impl ElectionBackend for MemoryBackend {
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership> {
        let value = Some(bid.value.clone());
        let guard = self.acquire_in(Space::Election, Access::Write, name, &bid.options, value);
        Ok(Leadership::new(guard.await?, bid.value))
    }

    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        Ok(self.table.leader(name))
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let leaders = WatchStream::new(self.table.watch_leader(name));
        let mut filter = LeaderFilter::new();
        Ok(leaders
            .filter_map(move |leader| {
                let newer = leader.filter(|l| filter.admit(l));
                async move { newer.map(Ok) }
            })
            .boxed())
    }
}
