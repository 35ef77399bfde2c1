//! Fault 5 on a Redis Cluster: a failover of the master that owns the
//! lock's slot. Killing every node would only repeat the one-server row;
//! what a cluster adds is that a replica takes the lock's keys over, with
//! whatever asynchronous replication had copied to it.

use std::io;
use std::time::Duration;

use distlock_testkit::servers::{LaunchError, RedisCluster, RedisClusterNode};

/// What went wrong failing the lock's master over.
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    /// The cluster could not say which master owns the key's slot.
    #[error("find the master of {key:?}: {source}")]
    Owner {
        /// The key whose slot was looked up.
        key: String,
        /// Why the topology could not be read.
        source: io::Error,
    },
    /// No replica took the killed master's slots within the launcher's
    /// bound.
    #[error("no replica took over from {master}: {source}")]
    NoTakeover {
        /// The killed master, `127.0.0.1:PORT`.
        master: String,
        /// What the launcher saw last.
        source: LaunchError,
    },
    /// The killed master did not come back and rejoin as a replica.
    #[error("{master} did not rejoin the cluster: {source}")]
    NoRejoin {
        /// The killed master, `127.0.0.1:PORT`.
        master: String,
        /// What the launcher saw last.
        source: LaunchError,
    },
}

/// The master that owns a lock's slot, to be failed over.
#[derive(Debug)]
pub struct Failover<'a> {
    cluster: &'a RedisCluster,
    master: &'a RedisClusterNode,
}

impl<'a> Failover<'a> {
    /// Finds the master that owns the slot of `key` now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn of(cluster: &'a RedisCluster, key: &str) -> Result<Failover<'a>, FailoverError> {
        let master = cluster
            .master_for_key(key)
            .await
            .map_err(|source| FailoverError::Owner {
                key: key.to_owned(),
                source,
            })?;
        Ok(Failover { cluster, master })
    }

    /// The master, `127.0.0.1:PORT`.
    pub fn master(&self) -> String {
        self.master.addr()
    }

    /// Kills (`SIGKILL`) the master and waits, bounded by the launcher's
    /// failover timeout, until one of its replicas has taken its slots and
    /// every live node agrees; returns how long that took.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the master stays down; [`Failover::rejoin`] brings it
    /// back.
    pub async fn kill(&self) -> Result<Duration, FailoverError> {
        self.master.kill().await;
        self.cluster
            .wait_failover(self.master)
            .await
            .map_err(|source| FailoverError::NoTakeover {
                master: self.master(),
                source,
            })
    }

    /// Restarts the old master (empty: nothing persists) and waits until it
    /// has rejoined as a replica of the node that took its slots and synced
    /// from it, so that the next cell starts on a whole cluster.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the node is left down or rejoining.
    pub async fn rejoin(&self) -> Result<(), FailoverError> {
        let rejoined = async {
            self.master.restart().await?;
            self.cluster.wait_ok().await
        };
        rejoined.await.map_err(|source| FailoverError::NoRejoin {
            master: self.master(),
            source,
        })
    }
}
