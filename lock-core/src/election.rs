//! Leader election: campaign, proclaim, leader, observe, resign.
//!
//! Election is a lock whose holder publishes a value. Leadership carries a
//! fencing token like any lock, so a deposed leader's writes can be rejected.

use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::guard::LockGuard;
use crate::lost::{LostReason, LostSignal};
use crate::name::LockName;
use crate::options::AcquireOptions;

/// The current leader of an election as observers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The value the leader proclaimed.
    pub value: Vec<u8>,
    /// The leadership's fencing token. [`token()`](Self::token) reads the
    /// same, as `guard.token()` and `leadership.token()` do.
    pub token: FencingToken,
    /// The backend key (or node) of the leadership.
    pub key: String,
}

impl LeaderInfo {
    /// The leadership's fencing token: a method, like
    /// [`LockGuard::token`](crate::LockGuard::token) and
    /// [`Leadership::token`](crate::Leadership::token), so code reads a
    /// token the same way wherever it comes from.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The backend key (or node) of the leadership, like
    /// [`LockGuard::key`](crate::LockGuard::key).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value as text, with invalid UTF-8 replaced.
    pub fn value_lossy(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// A stream of leaders, in the order they were elected or proclaimed.
pub type LeaderStream = BoxStream<'static, Result<LeaderInfo>>;

/// An election service, offered by lock backends next to locking.
///
/// A backend that implements it declares
/// [`Capabilities::election`](crate::Capabilities::election); that flag is
/// how code holding only a [`DynLockBackend`](crate::DynLockBackend) tells.
/// What it promises is its [`LockBackend::capabilities`]. The convenience
/// forms, names as `&str`, are in [`ElectionBackendExt`](crate::ElectionBackendExt).
///
/// # Contract
///
/// - At most one [`Leadership`] per election name is held at a time.
/// - Leadership tokens strictly increase across leaders, like lock tokens.
/// - [`observe`](Self::observe) yields the current leader (if any) and then
///   every later leader or proclaimed value, never going back in token order.
///   It yields a leader only when it differs from the last one yielded: a
///   higher token, or the same token with another value. Re-proclaiming the
///   value already published yields nothing; a change replaced before the
///   observer reads it may be skipped.
/// - After an error, [`observe`](Self::observe)'s stream yields it once; if
///   it [is retryable](Error::is_retryable) (a timeout, an unreachable
///   server) the stream goes on, reading again after a pause that grows up
///   to a few seconds; any other error ends the stream. The rule is
///   [`raw::observer_carries_on_after`](crate::raw::observer_carries_on_after),
///   applied by the observe loop every backend shares
///   ([`raw::observe_leaders`](crate::raw::observe_leaders)).
#[async_trait]
pub trait ElectionBackend: LockBackend {
    /// Waits until this client is the leader of `name`, then publishes `value`.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the candidacy; a queue entry left behind is removed
    /// in the background and in any case expires with its lease.
    async fn campaign(&self, name: &LockName, bid: Candidacy) -> Result<Leadership>;

    /// The current leader, if there is one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>>;

    /// Follows the leaders of `name`.
    ///
    /// An error is yielded once; a retryable one is followed by more
    /// leaders, any other ends the stream (see the contract above), so a
    /// caller that keeps observing through outages need only call this
    /// again when the stream ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future or the stream just stops observing.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream>;
}

/// A bid to lead an election: the value to publish once elected, and how
/// to wait for it.
#[derive(Debug, Clone, Default)]
pub struct Candidacy {
    /// Published as the leader's value once this candidate wins.
    pub value: Vec<u8>,
    /// The leadership's TTL and the bound on the wait, as for a lock.
    pub options: AcquireOptions,
}

impl Candidacy {
    /// A candidacy publishing `value`, with the default options.
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Candidacy {
            value: value.into(),
            options: AcquireOptions::new(),
        }
    }

    /// The same candidacy with `options` (TTL, wait bound, holder).
    pub fn with_options(mut self, options: AcquireOptions) -> Self {
        self.options = options;
        self
    }
}

/// An election backend chosen at run time.
pub type DynElectionBackend = dyn ElectionBackend;

/// Being the leader of an election. Dropping it resigns in the background.
pub struct Leadership {
    guard: LockGuard,
    value: Mutex<Vec<u8>>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("guard", &self.guard)
            .field("value", &String::from_utf8_lossy(&self.value()))
            .finish()
    }
}

impl Leadership {
    /// Wraps the lock guard of a won campaign. Its handle must implement
    /// [`HeldLock::proclaim`](crate::raw::HeldLock::proclaim).
    pub fn new(guard: LockGuard, value: Vec<u8>) -> Self {
        Leadership {
            guard,
            value: Mutex::new(value),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &LockName {
        self.guard.name()
    }

    /// The leadership's fencing token.
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// The backend key of the leadership.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The value last proclaimed.
    pub fn value(&self) -> Vec<u8> {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// This leadership as observers see it.
    pub fn info(&self) -> LeaderInfo {
        LeaderInfo {
            value: self.value(),
            token: self.token(),
            key: self.key().to_owned(),
        }
    }

    /// Whether we are still the leader.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// The lock guard behind this leadership: its key, token and validity.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// A cloneable signal that resolves when leadership is lost.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Waits until leadership is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) -> LostReason {
        self.guard.lost().await
    }

    /// Publishes a new value without giving up leadership.
    ///
    /// Fails with `NotHeld` or `LeaseLost` if we are no longer the leader.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled proclaim may or may not have been published.
    pub async fn proclaim(&self, value: impl Into<Vec<u8>> + Send) -> Result<()> {
        let value = value.into();
        let held = self
            .guard
            .held()
            .ok_or_else(|| Error::not_held("leadership was resigned"))?;
        held.proclaim(&value).await?;
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
        Ok(())
    }

    /// Gives up leadership so the next candidate can take over.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled resign may or may not have taken effect;
    /// the lease is no longer renewed either way.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// Stops renewing without resigning, as if this process had crashed.
    pub fn abandon(self) {
        self.guard.abandon()
    }
}
