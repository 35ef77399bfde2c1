//! The conformance target of the suites: a single server (fair or not), or
//! three independent servers under Redlock.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::{DynElectionBackend, LockGuard};
use distlock_testkit::conformance::Target;
use distlock_testkit::servers::{RedisServers, RespReply};

/// Real servers, each client with its own connections; Redlock on more
/// than one server.
pub struct RedisTarget {
    servers: RedisServers,
    /// Whether single-server clients queue (`fair`) or race.
    fair: bool,
    /// Whether single-server clients use the plain layout.
    plain: bool,
}

impl RedisTarget {
    /// One server, single-server clients.
    pub async fn single() -> Self {
        RedisTarget {
            servers: super::start_redises(1).await,
            fair: true,
            plain: false,
        }
    }

    /// One server, plain-layout (`layout=plain`) clients.
    pub async fn plain() -> Self {
        RedisTarget {
            servers: super::start_redises(1).await,
            fair: true,
            plain: true,
        }
    }

    /// One server, non-fair (`fair=false`) single-server clients.
    pub async fn nonfair() -> Self {
        RedisTarget {
            servers: super::start_redises(1).await,
            fair: false,
            plain: false,
        }
    }

    /// Three independent servers, Redlock clients.
    pub async fn redlock() -> Self {
        RedisTarget {
            servers: super::start_redises(3).await,
            fair: true,
            plain: false,
        }
    }

    fn is_redlock(&self) -> bool {
        self.servers.servers().len() > 1
    }
}

#[async_trait]
impl Target for RedisTarget {
    async fn election_client(&self) -> Arc<DynElectionBackend> {
        if self.is_redlock() {
            Arc::new(super::redlock_client(&self.servers).await)
        } else if self.plain {
            Arc::new(super::plain_client(self.servers.server(0)).await)
        } else {
            let config = super::config_for(self.servers.server(0));
            Arc::new(super::connect(config.with_fair(self.fair)).await)
        }
    }

    fn ttl(&self) -> std::time::Duration {
        super::TTL
    }

    /// Deletes the lock key on every server through separate connections,
    /// as expiry would; the holder must have had it on a majority.
    async fn kill_lease(&self, guard: &LockGuard) {
        let servers = self.servers.servers();
        let mut deleted = 0;
        for server in servers {
            if server.command(&["DEL", guard.key()]).await.expect("DEL") == RespReply::Integer(1) {
                deleted += 1;
            }
        }
        assert!(
            deleted > servers.len() / 2,
            "lock key {} held on only {deleted} of {} servers",
            guard.key(),
            servers.len()
        );
    }
}
