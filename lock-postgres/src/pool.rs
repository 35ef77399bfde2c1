//! A few shared connections per backend, not one per held lock.
//!
//! Every request is one statement (the multi-step work happens in server
//! functions), so requests from many tasks are pipelined on the same
//! connection and no transaction ever spans two of them: the pool hands
//! out shared clients round-robin. A connection that closed (a server
//! restart, a runtime that ended) is replaced on its next use.
//!
//! Renewals have a connection of their own: a statement that waits on the
//! server (an attempt queued behind a key's lock) stalls every request
//! pipelined behind it on its connection, and a renewal stalled that way
//! could let a held lock run out.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use distlock_core::Result;
use tokio::sync::Mutex;
use tokio_postgres::Client;

use crate::config::PostgresConfig;
use crate::connect::open_client;
use crate::errors::{from_pg, timed_out};

/// Round-robin slots, each with a connection opened on demand.
#[derive(Debug)]
pub(crate) struct Pool {
    config: PostgresConfig,
    slots: Vec<Slot>,
    next: AtomicUsize,
    renewals: Slot,
}

/// One connection, opened on demand and again after it closed.
type Slot = Mutex<Option<Arc<Client>>>;

/// Which connections a request goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The shared connections, round-robin.
    Shared,
    /// The renewals' own connection.
    Renewals,
}

impl Pool {
    /// Empty slots for `config.pool_size` connections.
    pub(crate) fn new(config: &PostgresConfig) -> Self {
        Pool {
            config: config.clone(),
            slots: (0..config.pool_size).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            renewals: Mutex::new(None),
        }
    }

    /// A live shared connection, opened if its slot has none.
    pub(crate) async fn client(&self) -> Result<Arc<Client>> {
        self.client_in(Lane::Shared).await
    }

    /// A live connection of `lane`, opened if its slot has none.
    async fn client_in(&self, lane: Lane) -> Result<Arc<Client>> {
        let slot = match lane {
            Lane::Shared => {
                &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()]
            }
            Lane::Renewals => &self.renewals,
        };
        let mut slot = slot.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(client.clone());
        }
        let client = Arc::new(open_client(&self.config).await?);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Runs `request` on a shared connection within the request timeout;
    /// `context` says what it does, for errors.
    pub(crate) async fn run<T, F, Fut>(&self, context: &str, request: F) -> Result<T>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        self.run_in(Lane::Shared, context, request).await
    }

    /// Runs `request` on a connection of `lane` within the request
    /// timeout; `context` says what it does, for errors.
    pub(crate) async fn run_in<T, F, Fut>(&self, lane: Lane, context: &str, request: F) -> Result<T>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        let bound = self.config.request_timeout;
        let attempt = async {
            let client = self.client_in(lane).await?;
            request(client).await.map_err(|e| from_pg(e, context))
        };
        match tokio::time::timeout(bound, attempt).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(context, bound)),
        }
    }
}
