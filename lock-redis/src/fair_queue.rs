//! Acquisition on one server: `SET NX` with a FIFO wait queue in Redis that
//! wakes only the next waiter.
//!
//! 1. Register our waiter id with the instance's pub/sub dispatcher (the
//!    instance channel was subscribed at connect, so no wake-up can be
//!    published before we listen).
//! 2. Run the acquire script: it takes the lock if it is free and nobody is
//!    ahead of us, or appends us to the queue and says how long the holder's
//!    lease still runs.
//! 3. Sleep until our wake-up message, the holder's lease end, a refresh of
//!    our queue entry (every TTL/3), or our deadline, whichever is first.
//!    The holder's release script hands the lock straight to the first live
//!    waiter (sets the key to its owner id, increments the fence) and
//!    publishes the token to it: the waiter holds the lock when the message
//!    arrives, without another round trip. Otherwise run the script again;
//!    it also notices a hand-over whose message was lost, so a lost message
//!    costs at most TTL/3.
//! 4. A hand-over message counts only if its token is above the fence our
//!    last "busy" reply saw, and its lease, counted from that reply's send
//!    time, is still valid. Otherwise it is stale (we were paused past its
//!    TTL, and another client may hold the lock now): the script checks
//!    again. No grant whose validity has passed becomes a guard.
//!
//! A contended acquisition costs two scripts: join the queue, and (later)
//! release.
//!
//! **Non-fair** (`fair=false`), the same loop runs without the queue: the
//! script takes the lock whenever it is free, else registers our waiter id
//! in the waiter set only (so operators see us). A release that leaves the
//! lock free (nobody queued in the fair mode took it) wakes the registered
//! waiter that tried the longest ago, on our instance channel, with no
//! token: it runs the script again and races everyone else, the releaser
//! included. The same timers bound a lost wake-up. Tokens, leases, renewal
//! and release are those of the fair mode.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::SentAt;
use distlock_core::{Error, Result, Wait};
use tokio::time::{Instant, sleep_until};

use crate::acquire_cleanup::AcquireCleanup;
use crate::attempt::{self, Mode, Outcome};
use crate::servers::{Granted, Request, Servers, new_owner_id, still_valid};

/// Pause before retrying after an error whose outcome is unknown.
pub(crate) const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);
/// Grants in a row whose reply came after their lease could be vouched for,
/// before giving up.
pub(crate) const MAX_LATE_GRANTS: u32 = 3;

/// Acquires on the single server of `servers`, queueing when `fair`, else
/// racing.
pub(crate) async fn acquire(
    servers: &Arc<Servers>,
    request: &Request<'_>,
    fair: bool,
) -> Result<Granted> {
    let node = &servers.nodes[0];
    let owner = new_owner_id();
    let start = Instant::now();
    let deadline = request.wait.deadline_from(start);
    let waiting = request.wait != Wait::No;
    let waiter = if waiting {
        servers.next_waiter_id(&owner, request.ttl)
    } else {
        String::new()
    };
    let wake = waiting.then(|| node.wakeups().register_waiter(&waiter));
    let mut cleanup = AcquireCleanup::new(servers, &request.keys, &owner, &waiter);
    let refresh = (request.ttl / 3).max(Duration::from_millis(1));
    let mode = Mode {
        owner: &owner,
        waiter: &waiter,
        enqueue: waiting && fair,
        register: waiting && !fair,
        fair,
        confirmed: true,
    };
    // Our last script that answered "busy": when it was sent and the fence
    // it saw. A hand-over to us after it has a larger token (every script of
    // ours that ran after a hand-over would have answered "acquired"), and
    // its lease started after that send time. A hand-over message with a
    // token up to that fence is stale: its lease ran out before the script
    // ran, and the lock may be someone else's now.
    let mut busy_sent = SentAt::now();
    let mut busy_fence = 0;
    let mut late_grants = 0;
    // A wait that ends in an error (it ran out, the server failed) leaves
    // the queue before returning; a dropped future leaves it in the
    // background ([`AcquireCleanup`]'s drop).
    let result: Result<Granted> = async {
        loop {
            let sent = SentAt::now();
            let outcome = attempt::run(node, request, mode).await;
            let nap = match outcome {
                Ok(Outcome::Acquired(token)) if still_valid(&sent, request.ttl) => {
                    cleanup.disarm();
                    return Ok(Granted {
                        owner: owner.clone(),
                        token,
                        sent,
                    });
                }
                Ok(Outcome::Acquired(token)) => {
                    // The reply came too late to vouch for the lease (a paused
                    // process, an overloaded link). Ask again: if the key is
                    // still ours, the script restarts its lease.
                    late_grants += 1;
                    if late_grants > MAX_LATE_GRANTS {
                        return Err(late_grants_error(request, node.addr(), late_grants));
                    }
                    tracing::debug!(token, "grant arrived after its validity; asking again");
                    continue;
                }
                Ok(Outcome::Busy { .. }) if !waiting => {
                    cleanup.disarm();
                    return Err(Error::would_block(format!(
                        "{} is held by another client (redis at {})",
                        request.subject(),
                        node.addr()
                    )));
                }
                Ok(Outcome::Busy { wait_ms, fence }) => {
                    busy_sent = sent;
                    busy_fence = busy_fence.max(fence);
                    match u64::try_from(wait_ms) {
                        Ok(ms) if ms > 0 => refresh.min(Duration::from_millis(ms)),
                        _ => refresh,
                    }
                }
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
            if let Some(wake) = &wake {
                tokio::select! {
                    () = wake.woken() => {}
                    () = sleep_until(wake_at) => {}
                }
                if let Some(token) = wake.take_grant() {
                    if token > busy_fence && still_valid(&busy_sent, request.ttl) {
                        cleanup.disarm();
                        return Ok(Granted {
                            owner: owner.clone(),
                            token,
                            sent: busy_sent.clone(),
                        });
                    }
                    // Stale, or too late to vouch for: the script checks at once
                    // whether the lock is (still) ours.
                    tracing::debug!(
                        token,
                        busy_fence,
                        "ignoring a hand-over that is stale or whose lease may have run out"
                    );
                }
            }
        }
    }
    .await;
    if result.is_err() {
        cleanup.finish().await;
    }
    result
}

/// The `Timeout` of an acquisition whose `count` grants in a row came too
/// late to vouch for.
pub(crate) fn late_grants_error(request: &Request<'_>, addr: &str, count: u32) -> Error {
    Error::timeout(format!(
        "{} on redis at {addr}: {count} grants in a row arrived after their {} TTL had run out; is this process starved or the network overloaded? Use a longer TTL",
        request.subject(),
        distlock_core::raw::human_duration(request.ttl)
    ))
}

pub(crate) fn timed_out(request: &Request<'_>, addr: &str, start: Instant) -> Error {
    Error::timeout(format!(
        "{} on redis at {addr} still held by another client after waiting {}",
        request.subject(),
        distlock_core::raw::human_duration(start.elapsed())
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_core::{LockBackendExt, LockName};
    use distlock_testkit::assert::within;
    use distlock_testkit::servers::{RedisServer, RespReply};

    use crate::keys::{KeySpace, Space};
    use crate::scripts::SCRIPTS;
    use crate::{RedisBackend, RedisConfig};

    const TTL: Duration = Duration::from_secs(30);
    const BOUND: Duration = Duration::from_secs(10);

    /// A waiter that got the lock from a release's hand-over, and whose
    /// acquire attempt timed out on the client but ran on the server only
    /// after that hand-over (a slow link, a paused server), still holds the
    /// lock with the token it was handed: the late attempt restarts the
    /// lease but keeps the token, so the holder record, `is_owner` and
    /// guarded writes agree with the guard.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_acquire_attempt_keeps_the_hand_over_token() {
        let server = RedisServer::start()
            .await
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        let config = RedisConfig::new("127.0.0.1", server.port()).with_default_ttl(TTL);
        let holder = RedisBackend::connect(config.clone())
            .await
            .expect("connect");
        let waiter = RedisBackend::connect(config.clone())
            .await
            .expect("connect");
        let name = LockName::new("late/attempt").unwrap();
        let keys = KeySpace::new(&config.common.prefix, 0).of(Space::Lock, &name);

        let first = holder.lock(name.as_str()).await.expect("first holder");
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            let name = name.clone();
            async move { waiter.lock(name.as_str()).await }
        });
        // The waiter's id as its acquire script queued it.
        let waiter_id = within(BOUND, "the waiter queued", async {
            loop {
                match server.command(&["LINDEX", &keys.queue, "0"]).await {
                    Ok(RespReply::Bulk(Some(id))) => break id,
                    _ => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        })
        .await;
        let owner = waiter_id.split('/').nth(2).expect("owner in waiter id");

        let first_token = first.token();
        first.release().await.expect("release hands over");
        let second = within(BOUND, "the hand-over", waiting)
            .await
            .expect("waiter task")
            .expect("handed the lock");
        assert!(second.token() > first_token);
        assert!(waiter.is_owner(&second).await.expect("is_owner"));

        // The waiter's attempt arrives late, as its client sent it.
        let ttl_ms = TTL.as_millis().to_string();
        let mut late = SCRIPTS.acquire.prepare_invoke();
        for key in keys.state() {
            late.key(key);
        }
        late.arg(owner)
            .arg(&ttl_ms)
            .arg(&waiter_id)
            .arg("qfc")
            .arg("late attempt");
        let mut conn = redis::Client::open(server.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let reply: Vec<i64> = late.invoke_async(&mut conn).await.expect("acquire script");
        let token = i64::try_from(second.token().get()).unwrap();
        assert!(
            waiter.is_owner(&second).await.expect("is_owner"),
            "the server no longer vouches for the guard it handed over"
        );
        assert_eq!(reply, [1, token], "the late attempt answers the held token");

        let recorded = server.command(&["GET", &keys.owner]).await.expect("GET");
        let RespReply::Bulk(Some(record)) = recorded else {
            panic!("no holder record: {recorded:?}");
        };
        assert_eq!(
            record.split(' ').nth(1),
            Some(token.to_string().as_str()),
            "holder record {record:?}"
        );
        waiter
            .guarded_put(&second, "late/attempt/data", "written")
            .await
            .expect("guarded write of the holder");
        second.release().await.expect("release");
    }
}
