//! Redlock: a lock on N independent servers, held when a majority granted it
//! within the lease's validity.
//!
//! One round: run the acquire script on every server in parallel (each with
//! the request timeout), count the grants, and check that the validity
//! `start + ttl - drift` has not passed. With a quorum, the fencing token is
//! the largest counter among the granting servers, and a second round raises
//! every server's counter to it ("confirm"): any later quorum overlaps this
//! one, so its token is larger. Without a quorum, the round is undone on all
//! servers (owner-checked) and retried after a release notice from any
//! server, the holder's remaining lease, or a short random delay.
//!
//! Redlock is not FIFO: every waiter hears every release.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::SentAt;
use distlock_core::{Error, ErrorKind, Result, Wait};
use futures::future::select_all;
use rand::Rng;
use tokio::time::{Instant, sleep_until};

use crate::acquire_cleanup::AcquireCleanup;
use crate::attempt::{self, Mode, Outcome};
use crate::fair_queue::timed_out;
use crate::quorum::{gather, vote_decided};
use crate::scripts::SCRIPTS;
use crate::servers::{Granted, Request, Servers, new_owner_id, no_quorum, still_valid};
use crate::wakeups::subscribed;

/// Retry delay after a round without quorum for lack of answers.
const RETRY_UNAVAILABLE: Duration = Duration::from_millis(100);
/// Upper bound of the random delay added to every retry, so that
/// contenders that split the vote do not collide again.
const JITTER_MS: u64 = 10;

/// Acquires on a quorum of `servers`.
pub(crate) async fn acquire(servers: &Arc<Servers>, request: &Request<'_>) -> Result<Granted> {
    let owner = new_owner_id();
    let start = Instant::now();
    let deadline = request.wait.deadline_from(start);
    let waiting = request.wait != Wait::No;
    let mut watches = if waiting {
        let watches: Vec<_> = servers
            .nodes
            .iter()
            .map(|node| node.wakeups().subscribe(&request.keys.released_channel))
            .collect();
        // A release heard on any server triggers the next round; a silent
        // minority must not delay the first one.
        subscribed(&watches, servers.quorum, servers.request_timeout).await;
        watches
    } else {
        Vec::new()
    };
    // Waiters register their id (outside any queue: they race) so that
    // operators see who waits; the clean-up removes it if we give up.
    let waiter = if waiting {
        servers.next_waiter_id(&owner, request.ttl)
    } else {
        String::new()
    };
    let mut cleanup = AcquireCleanup::new(servers, &request.keys, &owner, &waiter);
    let mode = Mode {
        owner: &owner,
        waiter: &waiter,
        enqueue: false,
        register: waiting,
        fair: false,
        confirmed: false,
    };
    let refresh = (request.ttl / 3).max(Duration::from_millis(1));
    // A wait that ends in an error (it ran out, the server failed) leaves
    // the queue before returning; a dropped future leaves it in the
    // background ([`AcquireCleanup`]'s drop).
    let result: Result<Granted> = async {
        loop {
            let sent = SentAt::now();
            let calls = servers
                .nodes
                .iter()
                .map(|node| attempt::run(node, request, mode))
                .collect();
            let decided = vote_decided(servers.nodes.len(), servers.quorum, |r| {
                matches!(r, Ok(Outcome::Acquired(_)))
            });
            let results = gather(calls, decided).await;
            // Servers that did not answer yet may still grant.
            let stragglers = results.len() < servers.nodes.len();
            let mut tokens = Vec::new();
            let mut busy = Vec::new();
            let mut errors = Vec::new();
            for result in results {
                match result {
                    Ok(Outcome::Acquired(token)) => tokens.push(token),
                    Ok(Outcome::Busy { wait_ms, .. }) => busy.push(wait_ms),
                    Err(e) => errors.push(e),
                }
            }
            if tokens.len() >= servers.quorum && still_valid(&sent, request.ttl) {
                let token = tokens.iter().copied().max().unwrap_or(0);
                match confirm(servers, request, &owner, token).await {
                    Ok(()) if still_valid(&sent, request.ttl) => {
                        if waiting {
                            forget_waiter(servers, request, &waiter);
                        }
                        cleanup.disarm();
                        return Ok(Granted {
                            owner: owner.clone(),
                            token,
                            sent,
                        });
                    }
                    Ok(()) => {}
                    Err(e) => errors.push(e),
                }
            }
            // No quorum in time: undo this round everywhere before trying again,
            // stragglers included (owner-checked; the clean-up does it again if
            // we give up).
            if !tokens.is_empty() || !errors.is_empty() || stragglers {
                let _ = servers.release(&request.keys, &owner, "").await;
            }
            let answered = tokens.len() + busy.len();
            let unavailable = errors.len() > servers.nodes.len() - servers.quorum;
            let failure = || {
                if let Some(auth) = errors.iter().find(|e| e.kind() == ErrorKind::Unauthorized) {
                    return Error::new(auth.kind(), auth.message().to_owned());
                }
                no_quorum(
                    servers.backend,
                    servers.nodes.len(),
                    servers.quorum,
                    &format!("acquiring lock {}", request.name),
                    answered,
                    &errors,
                )
            };
            if !waiting {
                if !stragglers {
                    cleanup.disarm();
                }
                return Err(if unavailable {
                    failure()
                } else {
                    Error::would_block(format!(
                        "lock {} is held by another client (redlock quorum {} of {} at {})",
                        request.name,
                        servers.quorum,
                        servers.nodes.len(),
                        servers.addrs()
                    ))
                });
            }
            if errors.iter().any(|e| e.kind() == ErrorKind::Unauthorized) {
                return Err(failure());
            }
            let now = Instant::now();
            if let Some(d) = deadline
                && now >= d
            {
                return Err(if unavailable {
                    failure()
                } else {
                    timed_out(request, &servers.addrs(), start)
                });
            }
            let base = if unavailable {
                RETRY_UNAVAILABLE
            } else {
                busy.iter()
                    .filter_map(|ms| u64::try_from(*ms).ok().filter(|ms| *ms > 0))
                    .min()
                    .map_or(refresh, |ms| refresh.min(Duration::from_millis(ms)))
            };
            let jitter = Duration::from_millis(rand::rng().random_range(0..=JITTER_MS));
            let mut wake_at = now + base + jitter;
            if let Some(d) = deadline {
                wake_at = wake_at.min(d);
            }
            let released = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
            tokio::select! {
                _ = released => {
                    // Let the releases of a split vote land before retrying.
                    tokio::time::sleep(jitter).await;
                }
                () = sleep_until(wake_at) => {}
            }
        }
    }
    .await;
    if result.is_err() {
        cleanup.finish().await;
    }
    result
}

/// Removes our waiter entry in the background from the servers that did
/// not grant us (the granting ones removed it in the acquire script); it
/// would otherwise show us waiting for one more TTL.
fn forget_waiter(servers: &Arc<Servers>, request: &Request<'_>, waiter: &str) {
    let (servers, keys, waiter) = (servers.clone(), request.keys.clone(), waiter.to_owned());
    distlock_core::raw::spawn_background(async move {
        // An owner id no lock has: this deletes only the waiter entry.
        if let Err(e) = servers.release(&keys, "", &waiter).await {
            tracing::debug!(key = %keys.owner, error = %e, "removing a served waiter entry failed; it expires after one TTL");
        }
    });
}

/// Raises every server's fencing counter to `token` (and confirms an
/// election's leader record); `Ok` when a quorum did, counting for an
/// election only servers that hold and confirmed our leader record.
async fn confirm(servers: &Servers, request: &Request<'_>, owner: &str, token: u64) -> Result<()> {
    let keys = &request.keys;
    let token = token.to_string();
    let election = if request.value.is_some() { "1" } else { "0" };
    let what = format!("confirming the fencing token of lock {}", request.name);
    let key_list = [&*keys.fence, &keys.owner, &keys.leader];
    let args = [
        token.as_bytes(),
        owner.as_bytes(),
        election.as_bytes(),
        keys.leader_channel.as_bytes(),
    ];
    // Count only servers that confirmed: for an election, a server that
    // answered but does not hold our record (one that never granted us)
    // must not make up the quorum, or campaign could return while the
    // confirmations that make the leader readable are still in flight.
    let results = servers
        .vote(|node| node.eval(&SCRIPTS.confirm, &key_list, &args, &what))
        .await;
    let answered = results.iter().filter(|r| r.is_ok()).count();
    let confirmed = results.iter().filter(|r| matches!(r, Ok(1))).count();
    let errors: Vec<Error> = results.into_iter().filter_map(|r| r.err()).collect();
    if confirmed >= servers.quorum {
        Ok(())
    } else if errors.is_empty() || answered - confirmed > servers.nodes.len() - servers.quorum {
        Err(Error::lease_lost(format!(
            "lock {} on {} at {}: only {confirmed} of {} servers confirmed our grant ({} needed); our key expired or was released meanwhile",
            request.name,
            servers.backend,
            servers.addrs(),
            servers.nodes.len(),
            servers.quorum
        )))
    } else {
        Err(no_quorum(
            servers.backend,
            servers.nodes.len(),
            servers.quorum,
            &what,
            answered,
            &errors,
        ))
    }
}
