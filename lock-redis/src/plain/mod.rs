//! The plain layout (`layout=plain`): a lock is one key, `<prefix><name>`,
//! taken with `SET NX PX` and a random value, as redis-py's `Lock`,
//! go-redsync and node-redlock take it, so distlock and those clients
//! exclude each other on one server.
//!
//! Release is their compare-and-delete and renewal their
//! compare-and-`PEXPIRE` (redis-py's `reacquire`), each one Lua script;
//! neither ever touches a key whose value is not ours. The other clients
//! publish nothing when they release, so waiters poll: each attempt is one
//! script that takes the lock if the key is absent, else registers the
//! waiter (so `inspect` counts distlock's waiters) and answers the holder's
//! `PTTL`. Between attempts a waiter sleeps a jittered nap that doubles
//! from [`MIN_NAP`] up to [`MAX_NAP`] (at most TTL/3), and never past the
//! holder's lease end. Not FIFO: whoever tries first after a release wins.
//!
//! The value is `<id>.<token>.<description>` (see `scripts/plain.rs`); the
//! fencing token is the server clock in microseconds when the key was set,
//! so tokens are best effort: they increase from one holder to the next
//! unless the server's clock steps back, and other clients' holders have
//! none.

mod admin;
mod value;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::SentAt;
use distlock_core::{Error, Result, Wait};
use tokio::time::{Instant, sleep_until};

use crate::acquire_cleanup::AcquireCleanup;
use crate::fair_queue::{MAX_LATE_GRANTS, RETRY_AFTER_ERROR, late_grants_error, timed_out};
use crate::node::Node;
use crate::scripts::SCRIPTS;
use crate::servers::{Granted, Request, Servers, millis, new_owner_id, still_valid};

pub(crate) use admin::{force_release, inspect};

/// The first nap between two attempts, and the shortest.
pub(crate) const MIN_NAP: Duration = Duration::from_millis(2);
/// The longest nap.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(100);

/// `Unsupported` for what the plain layout does not offer.
pub(crate) fn lacks(what: &str) -> Error {
    Error::unsupported(format!(
        "the redis backend's plain layout (layout=plain) has no {what}: it is one SET NX PX key per lock, shared with other clients; use the distlock layout (leave layout out)"
    ))
}

/// What one attempt found.
enum Attempt {
    /// The key holds our value.
    Held(String),
    /// Someone else holds it; its lease left, when the key has one.
    Busy(Option<Duration>),
}

/// Takes the lock of `request`, polling while it is held elsewhere.
pub(crate) async fn acquire(servers: &Arc<Servers>, request: &Request<'_>) -> Result<Granted> {
    let node = &servers.nodes[0];
    let id = new_owner_id();
    let start = Instant::now();
    let deadline = request.wait.deadline_from(start);
    let waiting = request.wait != Wait::No;
    let waiter = match waiting {
        true => servers.next_waiter_id(&id, request.ttl),
        false => String::new(),
    };
    // Removes our waiter entry, and a key of ours whose grant we never saw.
    let mut cleanup = AcquireCleanup::new(servers, &request.keys, &id, &waiter);
    let mut naps = Naps::new(request.ttl);
    let mut late_grants = 0;
    let result: Result<Granted> = async {
        loop {
            let sent = SentAt::now();
            let nap = match attempt(node, request, &id, &waiter).await {
                Ok(Attempt::Held(value)) if still_valid(&sent, request.ttl) => {
                    cleanup.disarm();
                    let token = value::token_of(&value).ok_or_else(|| {
                        Error::backend(format!(
                            "{} on redis at {}: our value {value:?} carries no token; was the key rewritten by hand?",
                            request.subject(),
                            node.addr()
                        ))
                    })?;
                    return Ok(Granted { owner: value, token, sent });
                }
                Ok(Attempt::Held(_)) => {
                    // Too late to vouch for; the next attempt restarts the
                    // lease if the key is still ours.
                    late_grants += 1;
                    if late_grants > MAX_LATE_GRANTS {
                        return Err(late_grants_error(request, node.addr(), late_grants));
                    }
                    continue;
                }
                Ok(Attempt::Busy(_)) if !waiting => {
                    cleanup.disarm();
                    return Err(Error::would_block(format!(
                        "{} is held by another client (redis at {}, layout=plain)",
                        request.subject(),
                        node.addr()
                    )));
                }
                Ok(Attempt::Busy(left)) => naps.next(left),
                Err(e) if waiting && e.is_retryable() => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "acquire attempt failed; retrying");
                    RETRY_AFTER_ERROR
                }
                Err(e) => return Err(e),
            };
            let mut wake_at = Instant::now() + nap;
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Err(timed_out(request, node.addr(), start));
                }
                wake_at = wake_at.min(d);
            }
            sleep_until(wake_at).await;
        }
    }
    .await;
    if result.is_err() {
        cleanup.finish().await;
    }
    result
}

/// Runs the acquire script once.
async fn attempt(node: &Node, request: &Request<'_>, id: &str, waiter: &str) -> Result<Attempt> {
    let keys = &request.keys;
    let ttl_ms = millis(request.ttl).to_string();
    let args = [id, &ttl_ms, &request.about, waiter].map(str::as_bytes);
    let what = format!("acquiring {}", request.subject());
    let reply: (i64, String) = node
        .eval(
            &SCRIPTS.plain_acquire,
            &[&keys.owner, &keys.waiters],
            &args,
            &what,
        )
        .await?;
    Ok(match reply {
        (1, value) => Attempt::Held(value),
        (_, left) => Attempt::Busy(
            left.parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        ),
    })
}

/// A waiter's naps: jittered, doubling up to a ceiling.
#[derive(Debug)]
struct Naps {
    next: Duration,
    ceiling: Duration,
}

impl Naps {
    fn new(ttl: Duration) -> Self {
        Naps {
            next: MIN_NAP,
            ceiling: MAX_NAP.min(ttl / 3).max(MIN_NAP),
        }
    }

    /// The nap before the next attempt: between half and all of the
    /// current step (so waiters that started together spread out), and no
    /// later than just after the holder's lease ends.
    fn next(&mut self, lease_left: Option<Duration>) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(self.ceiling);
        let jitter = step / 2 * (rand::random::<u32>() % 1001) / 1000;
        let nap = step / 2 + jitter;
        match lease_left {
            Some(left) => nap.min(left + MIN_NAP),
            None => nap,
        }
        .max(MIN_NAP / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naps_double_within_their_bounds_and_stop_at_the_lease_end() {
        let mut naps = Naps::new(Duration::from_secs(30));
        let mut steps = Vec::new();
        for _ in 0..12 {
            steps.push(naps.next(None));
        }
        assert!(
            steps.iter().all(|n| *n >= MIN_NAP / 2 && *n <= MAX_NAP),
            "{steps:?}"
        );
        assert!(steps[11] >= MAX_NAP / 2, "{steps:?}");
        let soon = naps.next(Some(Duration::from_millis(1)));
        assert!(soon <= Duration::from_millis(1) + MIN_NAP, "{soon:?}");
        let mut short = Naps::new(Duration::from_millis(30));
        for _ in 0..12 {
            assert!(short.next(None) <= Duration::from_millis(10));
        }
    }
}
