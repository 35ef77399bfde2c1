//! Mutants: a real backend wrapped in the client so that it breaks one
//! promise. The matrix must catch each one; a mutant that passes shows a
//! verdict too weak to fail on what matters.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, DynLockBackend, LockGuard, LockName, LostReason, Result};

use super::contended::Contended;

/// Which promise the wrapped backend breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutant {
    /// Tokens rise, but nobody is excluded: each grant is released at once
    /// and the client goes on as if it held.
    NoExclusion,
    /// The lost signal never fires and `is_held()` stays true after the
    /// lease ended.
    SilentLoss,
    /// `is_held()` and the lost signal trust the lock one TTL longer than
    /// the server's lease lasts.
    LongValidity,
    /// etcd, with a waiter's turn confirmed by a member-local read, not a
    /// linearizable one: the defect lock-etcd's confirming read is there
    /// against. It lives in lock-etcd, built into a client of its own
    /// (see [`UNCONFIRMED_TURN_BUILD`]); this wrapper adds nothing.
    UnconfirmedTurn,
}

/// How the client of [`Mutant::UnconfirmedTurn`] is built: lock-etcd reads
/// the variable at compile time, and the profile keeps that build apart
/// from every other.
pub const UNCONFIRMED_TURN_BUILD: &str = "DISTLOCK_MUTANT_UNCONFIRMED_TURN=1 cargo build --locked \
     --profile mutant -p fault-matrix --bin fault-matrix-client";

/// Whether this binary was built with lock-etcd's unconfirmed turn.
pub const BUILT_UNCONFIRMED: bool = option_env!("DISTLOCK_MUTANT_UNCONFIRMED_TURN").is_some();

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 4] = [
        Mutant::NoExclusion,
        Mutant::SilentLoss,
        Mutant::LongValidity,
        Mutant::UnconfirmedTurn,
    ];

    /// `no-exclusion`, `silent-loss`, `long-validity` or `unconfirmed-turn`.
    pub fn id(self) -> &'static str {
        match self {
            Mutant::NoExclusion => "no-exclusion",
            Mutant::SilentLoss => "silent-loss",
            Mutant::LongValidity => "long-validity",
            Mutant::UnconfirmedTurn => "unconfirmed-turn",
        }
    }

    /// The mutant an [`id`](Self::id) names.
    pub fn parse(text: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.id() == text)
    }
}

/// An acquisition as the workload sees it: a real guard, or a mutant's
/// lie about one.
#[derive(Debug)]
pub struct Held {
    /// When the grant came back ([`now_ns`](super::clock::now_ns)).
    pub granted_ns: u64,
    guard: Option<LockGuard>,
    token: u64,
    key: String,
    ttl: Duration,
    mutant: Option<Mutant>,
    /// [`Mutant::LongValidity`]: when the real guard's validity ended, as
    /// last seen while it was held.
    valid_until: Mutex<Instant>,
}

impl Held {
    /// Acquires `name`, and lets `mutant` (if any) break its promise.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::acquire`](distlock_core::LockBackend::acquire).
    pub async fn acquire(
        contended: Contended,
        backend: &DynLockBackend,
        name: &LockName,
        options: &AcquireOptions,
        mutant: Option<Mutant>,
    ) -> Result<Held> {
        let guard = contended.acquire(backend, name, options).await?;
        let granted_ns = super::clock::now_ns();
        let token = guard.token().get();
        let key = guard.key().to_owned();
        let ttl = guard.ttl();
        let valid_until = Mutex::new(Instant::now() + guard.remaining_validity().unwrap_or(ttl));
        let guard = if mutant == Some(Mutant::NoExclusion) {
            // The token was drawn; the exclusion is given back at once.
            let _ = guard.release().await;
            None
        } else {
            Some(guard)
        };
        Ok(Held {
            granted_ns,
            guard,
            token,
            key,
            ttl,
            mutant,
            valid_until,
        })
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The backend key of the acquisition.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the workload may write, as `LockGuard::is_held` (or the
    /// mutant's version of it) says.
    pub fn is_held(&self) -> bool {
        let Some(guard) = &self.guard else {
            return true;
        };
        match self.mutant {
            Some(Mutant::SilentLoss) => true,
            Some(Mutant::LongValidity) => {
                let mut until = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
                if guard.is_held() {
                    *until = Instant::now() + guard.remaining_validity().unwrap_or(self.ttl);
                    return true;
                }
                Instant::now() < *until + self.ttl
            }
            _ => guard.is_held(),
        }
    }

    /// Waits for the lost signal as the workload would see it; never
    /// resolves when it does not fire.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let signal = self.guard.as_ref().map(LockGuard::lost_signal);
        let (mutant, ttl) = (self.mutant, self.ttl);
        async move {
            match (signal, mutant) {
                (None, _) | (_, Some(Mutant::SilentLoss)) => std::future::pending().await,
                (Some(signal), Some(Mutant::LongValidity)) => {
                    let reason = signal.lost().await;
                    if reason != LostReason::Released {
                        tokio::time::sleep(ttl).await;
                    }
                    reason
                }
                (Some(signal), _) => signal.lost().await,
            }
        }
    }

    /// Releases the real guard, if the mutant kept one.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<()> {
        match self.guard {
            Some(guard) => guard.release().await,
            None => Ok(()),
        }
    }
}
