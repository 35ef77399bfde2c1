//! The revision queue: joining it in one Txn, waiting for our turn, and
//! leaving no entry behind when the wait is abandoned.
//!
//! Every contender writes `<queue><lease-hex>` under its own lease; the key
//! with the lowest `create_revision` holds the lock. A waiter decides its
//! turn from its backend's live view of the queue ([`crate::view`]): no
//! key older than its own left means the lock is its.
//!
//! Semaphores and read-write locks are the same queue with a different
//! grant rule: each entry stores its access ([`crate::shared`]), and a
//! waiter is let in once [`distlock_core::raw::blockers`] names none of the
//! entries ahead of it.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::raw::{blockers, check_limit_agrees};
use distlock_core::{Access, Error, ErrorKind, LockName, LostSignal, Result, Wait};
use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::backend::Inner;
use crate::keys::{KeySpace, Space};
use crate::lease::PooledLease;
use crate::rpc::Retry;
use crate::view::{self, Mirror, QueueEntry, Subscription};

/// When (after a queue view's watch was created) a waiter reads the queue
/// itself, in case that watch is unsynced: densely, since a stalled view
/// stalls every waiter of its backend. etcd syncs such a watch within its
/// 100 ms loop, so reading stops after that.
const UNSYNCED_RECHECKS: [Duration; 7] = [
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(35),
    Duration::from_millis(55),
    Duration::from_millis(80),
    Duration::from_millis(110),
];

/// A deliberate defect, to prove that the tests and the fault matrix catch
/// it: confirm a turn with a member-local read. On only in a build with
/// `DISTLOCK_MUTANT_UNCONFIRMED_TURN` set in the environment (not a cargo
/// feature, so that `--all-features` never turns it on).
const MUTANT_UNCONFIRMED_TURN: bool = option_env!("DISTLOCK_MUTANT_UNCONFIRMED_TURN").is_some();

/// How many times a try re-reads a queue that changed between its read and
/// its write before it gives up with `WouldBlock`.
const TRY_ROUNDS: usize = 8;

/// A queue key and its create revision: an entry someone waits for.
type KeyRev = (String, i64);

/// A place at the head of the queue: the lock is ours.
#[derive(Debug)]
pub(crate) struct Won {
    pub(crate) key: String,
    /// Our key's create revision: the fencing token.
    pub(crate) rev: i64,
    /// A store revision at which we were known to hold the lock.
    pub(crate) seen_at: i64,
    pub(crate) lease: PooledLease,
    /// Whether the lease may serve again after a confirmed release: not if
    /// joining took a retry, whose earlier attempt may still land and put
    /// our key back once we deleted it.
    pub(crate) reusable: bool,
}

/// Joins the queue of `name` and waits as `wait` allows.
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    space: Space,
    name: &LockName,
    queue: String,
    value: Vec<u8>,
    secs: i64,
    wait: Wait,
) -> Result<Won> {
    // The whole acquire takes at most `wait` plus one request timeout:
    // joining the queue (lease grant and Txn) shares one request timeout,
    // the wait ends `wait` after the start, and leaving the queue gets what
    // is left of that bound (the rest of it runs in the background).
    let start = Instant::now();
    let request_timeout = inner.rpc.request_timeout();
    let join_by = start + request_timeout;
    let deadline = wait.deadline_from(start);
    let what = format!("{} {:?}", space.noun(), name.as_str());
    let mut from_pool = true;
    let (mut entry, position) = loop {
        let (lease, pooled) = if from_pool {
            inner.pool.take_or_grant(secs, Some(join_by)).await?
        } else {
            (
                PooledLease::grant(&inner.rpc, &inner.keepalive, secs, Some(join_by)).await?,
                false,
            )
        };
        let mut entry = Entry {
            inner: inner.clone(),
            name: name.clone(),
            access: space.access(),
            what: what.clone(),
            key: KeySpace::entry(&queue, lease.id()),
            queue: queue.clone(),
            lease: Some(lease),
            written: false,
            retried: false,
            join_by,
        };
        let joined = if wait == Wait::No {
            entry.try_once(value.clone()).await.map(Joining::Won)
        } else {
            match entry.enqueue(value.clone()).await {
                Ok(Joined::Holder { rev, seen_at }) => Ok(Joining::Won(entry.won(rev, seen_at))),
                Ok(Joined::Waiting(position)) => Ok(Joining::Waiting(entry, position)),
                Err(e) => Err(e),
            }
        };
        match joined {
            // An idle lease can end on the server unnoticed (revoked from
            // outside, or expired while its keepalive was failing): try
            // once more, with a lease granted for this acquire.
            Err(e) if e.kind() == ErrorKind::LeaseLost && pooled => {
                tracing::debug!(error = %e, "idle lease was gone; granting a fresh one");
                from_pool = false;
            }
            Err(e) => return Err(e),
            Ok(Joining::Won(won)) => return Ok(won),
            Ok(Joining::Waiting(entry, position)) => break (entry, position),
        }
    };
    let lease_lost = entry
        .lease
        .as_ref()
        .map(PooledLease::lost_signal)
        .expect("the entry holds its lease until it is won");
    let rev = position.rev;
    let waited = match deadline {
        Some(deadline) => timeout_at(deadline, entry.wait_turn(position, &lease_lost)).await,
        None => Ok(entry.wait_turn(position, &lease_lost).await),
    };
    match waited {
        Ok(Ok(seen_at)) => Ok(entry.won(rev, seen_at)),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            let by = deadline.map_or(join_by, |d| d + request_timeout);
            entry.leave(by).await;
            let waited = match wait {
                Wait::Timeout(d) => d,
                _ => Duration::ZERO,
            };
            Err(Error::timeout(format!(
                "{} is still held by another client after waiting {} (etcd at {})",
                entry.what,
                distlock_core::raw::human_duration(waited),
                inner.rpc.endpoints()
            )))
        }
    }
}

/// How one try to join the queue ended.
enum Joining {
    /// The lock is ours.
    Won(Won),
    /// Queued behind others.
    Waiting(Entry, Position),
}

/// What joining the queue found.
enum Joined {
    /// Ours is the oldest key: the lock is ours at once.
    Holder { rev: i64, seen_at: i64 },
    /// Older keys exist: wait.
    Waiting(Position),
}

/// Where we stand in the queue after joining it.
#[derive(Debug, Clone)]
struct Position {
    /// Our key's create revision.
    rev: i64,
    /// A store revision at which our key was seen in the queue.
    seen_at: i64,
}

/// Our key in the queue. Dropped before the lock is won (cancellation,
/// error), it revokes its lease in the background, which deletes the key:
/// an abandoned waiter never blocks the others beyond that request. Its
/// `Drop` is etcd's acquire clean-up, what `AcquireCleanup` is in the
/// other backends.
struct Entry {
    inner: Arc<Inner>,
    name: LockName,
    /// What a shared entry asks for; `None` for a lock or election entry,
    /// which waits for every entry ahead.
    access: Option<Access>,
    what: String,
    key: String,
    queue: String,
    lease: Option<PooledLease>,
    /// Whether our key may exist on the server.
    written: bool,
    /// Whether the Txn that joined the queue took more than one attempt.
    retried: bool,
    /// Joining the queue (the lease grant and the Txn) ends by then.
    join_by: Instant,
}

impl Entry {
    /// `try_lock`: writes our key only if it would be granted at once, so
    /// a busy queue costs one read-only round trip and leaves nothing to
    /// clean up.
    ///
    /// The first Txn writes only into an empty queue. A shared entry may
    /// also be granted behind others: it then writes only if no key was
    /// put in the queue since the read that granted it (a key that left
    /// meanwhile only lets in more), re-reading if one was.
    async fn try_once(mut self, value: Vec<u8>) -> Result<Won> {
        let lease_id = self.lease_id();
        // Every key of the queue is older than this revision (an empty
        // range compares as revision 0).
        let mut unchanged_before = 1;
        for _ in 0..TRY_ROUNDS {
            self.written = true;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    self.queue.clone(),
                    CompareOp::Less,
                    unchanged_before,
                )
                .with_prefix()])
                .and_then([TxnOp::put(
                    self.key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease_id)),
                )])
                .or_else([
                    TxnOp::get(self.queue.clone(), Some(self.queue_read())),
                    TxnOp::get(self.key.clone(), None),
                ]);
            let op = format!("try to acquire {}", self.what);
            let (resp, attempts) = self.txn_by(&op, txn, Some(self.join_by)).await?;
            self.retried |= attempts > 1;
            let seen_at = header_rev(&resp);
            if resp.succeeded() {
                return Ok(self.won(seen_at, seen_at));
            }
            let ops = resp.op_responses();
            let ours = first_kv(&ops, 1).map(KeyValue::create_revision);
            // Our key exists if an earlier attempt wrote it behind someone.
            // An earlier attempt may also still be on its way and write our
            // key once the lock is free: the lease must then not go back to
            // the pool, which would keep that key (and the lock) alive.
            // Either way, dropping `self` revokes the lease, which removes
            // the key.
            self.written = ours.is_some() || self.retried;
            let blocking = self.waits_for(ahead_of(kvs(&ops, 0), ours.unwrap_or(i64::MAX)))?;
            match ours {
                // An earlier attempt of this request got through after all.
                Some(rev) if blocking.is_empty() => return Ok(self.won(rev, seen_at)),
                None if blocking.is_empty() => unchanged_before = seen_at + 1,
                _ => return Err(self.busy(&blocking)),
            }
        }
        self.written = self.retried;
        Err(Error::would_block(format!(
            "{} changed {TRY_ROUNDS} times while trying to join it (etcd at {})",
            self.what,
            self.inner.rpc.endpoints()
        )))
    }

    /// `WouldBlock` naming the keys we would wait for.
    fn busy(&self, blocking: &[KeyRev]) -> Error {
        let keys: Vec<&str> = blocking.iter().map(|(key, _)| key.as_str()).collect();
        Error::would_block(format!(
            "{} is held by another client (holder key{} {}, etcd at {})",
            self.what,
            if keys.len() > 1 { "s" } else { "" },
            keys.join(", "),
            self.inner.rpc.endpoints()
        ))
    }

    /// What a Txn or read of the whole queue needs to see: the holder of a
    /// lock, or every entry of a shared queue.
    fn queue_read(&self) -> GetOptions {
        match self.access {
            None => first_created(),
            Some(_) => oldest_first(),
        }
    }

    /// The entries of `ahead` (oldest first) whose departure we wait for;
    /// none means granted. A lock or election entry waits for the newest
    /// entry ahead; a shared entry for those `blockers` names, once its
    /// limit agrees with theirs.
    fn waits_for(&self, ahead: Vec<QueueEntry<'_>>) -> Result<Vec<KeyRev>> {
        let key_rev = |entry: &QueueEntry<'_>| (entry.key.to_owned(), entry.rev);
        let Some(access) = self.access else {
            return Ok(ahead.last().map(key_rev).into_iter().collect());
        };
        let accesses: Vec<Access> = ahead
            .iter()
            .map(|entry| crate::shared::access_of(entry.value, access))
            .collect();
        check_limit_agrees(&self.name, access, &accesses)?;
        Ok(blockers(access, &accesses)
            .into_iter()
            .map(|at| key_rev(&ahead[at]))
            .collect())
    }

    /// Puts our key (unless an earlier attempt did) and reads what is
    /// ahead of it, all in one Txn.
    ///
    /// Right after the put our key is the newest of the queue. For a lock
    /// the two newest keys say everything: ours alone means the lock is
    /// ours, otherwise the other one is our immediate predecessor. A shared
    /// entry reads the whole queue, to apply `blockers` to it.
    async fn enqueue(&mut self, value: Vec<u8>) -> Result<Joined> {
        let lease_id = self.lease_id();
        self.written = true;
        let ahead = match self.access {
            None => GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(2),
            Some(_) => oldest_first(),
        };
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(
                    self.key.clone(),
                    value,
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::get(self.queue.clone(), Some(ahead)),
            ])
            .or_else([
                TxnOp::get(self.key.clone(), None),
                TxnOp::get(self.queue.clone(), Some(first_created())),
            ]);
        let op = format!("acquire {}", self.what);
        let (resp, attempts) = self.txn_by(&op, txn, Some(self.join_by)).await?;
        self.retried = attempts > 1;
        let seen_at = header_rev(&resp);
        let ops = resp.op_responses();
        if resp.succeeded() {
            let rev = seen_at;
            let blocking = self.waits_for(ahead_of(kvs(&ops, 1), rev))?;
            return Ok(if blocking.is_empty() {
                Joined::Holder { rev, seen_at }
            } else {
                Joined::Waiting(Position { rev, seen_at })
            });
        }
        // An earlier attempt of this request put our key: find our place.
        let rev = first_kv(&ops, 0)
            .map(KeyValue::create_revision)
            .ok_or_else(|| self.gone())?;
        let holder = first_kv(&ops, 1).map(KeyValue::create_revision);
        if holder.is_none_or(|holder| holder == rev) {
            return Ok(Joined::Holder { rev, seen_at });
        }
        Ok(Joined::Waiting(Position { rev, seen_at }))
    }

    /// Waits until no entry ahead of ours blocks it any more (for a lock:
    /// no key older than ours is left); returns a revision at which that
    /// was true and our key still existed.
    ///
    /// The turn is first seen in this backend's view of the queue
    /// ([`crate::view`]) after every change it hears, with no read. The
    /// queue is also read directly: a few times while the view's watch is
    /// young (its first events may come late), and every TTL/3, because a
    /// watch can go silent for good (its member froze, or its connection
    /// died without a reset) and a waiter that has been let in must always
    /// find out.
    ///
    /// A turn seen in the view or in a member-local read is only a hint:
    /// both show a past revision, and our own lease may have ended since
    /// (a resumed etcd leader revokes several leases one revision after
    /// another). The turn is ours only once a linearizable read confirms
    /// that our key still exists and nothing ahead blocks it, as etcd's
    /// own Mutex reads its key after its wait.
    async fn wait_turn(&self, at: Position, lease_lost: &LostSignal) -> Result<i64> {
        let mut view = view::subscribe(&self.inner, &self.queue);
        let every = self.recheck_every();
        let mut next_read = Instant::now() + every;
        loop {
            if let Some(reason) = lease_lost.reason() {
                return Err(Error::lease_lost(format!(
                    "{}: our lease ended while waiting ({reason}); the queue entry is gone",
                    self.what
                )));
            }
            if let Some(shown) = view.read(at.seen_at, |queue| self.turn_shown(queue, at.rev))
                && shown?
            {
                match self.confirm_turn(at.rev).await {
                    Ok(Turn::Ours(seen_at)) => return Ok(seen_at),
                    Ok(Turn::Waiting) => {
                        tracing::debug!(key = self.key, "the view's turn was not confirmed");
                    }
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "confirming our turn failed; waiting");
                    }
                    Err(e) => return Err(e),
                }
            }
            let read_at = young_recheck(&view).map_or(next_read, |at| at.min(next_read));
            tokio::select! {
                reason = lease_lost.lost() => {
                    return Err(Error::lease_lost(format!(
                        "{}: our lease ended while waiting ({reason})", self.what
                    )));
                }
                () = view.changed() => continue,
                () = sleep_until(read_at) => {}
            }
            if read_at >= next_read {
                next_read = Instant::now() + every;
            }
            tracing::debug!(key = self.key, "re-reading the queue besides its view");
            match self.read_turn(at.rev, at.seen_at).await {
                Ok(Turn::Ours(seen_at)) => return Ok(seen_at),
                Ok(Turn::Waiting) => {}
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "queue read failed; waiting on the view");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether the view `queue` shows our turn: a hint, to be confirmed.
    fn turn_shown(&self, queue: &Mirror, rev: i64) -> Result<bool> {
        if queue.entry(rev).is_none_or(|ours| ours.key != self.key) {
            return Err(self.gone());
        }
        let ahead = match self.access {
            None => queue.ahead_of(rev).next_back().into_iter().collect(),
            Some(_) => queue.ahead_of(rev).collect(),
        };
        Ok(self.waits_for(ahead)?.is_empty())
    }

    /// How often a waiter re-reads the queue besides its view: every
    /// TTL/3, like a renewal.
    fn recheck_every(&self) -> Duration {
        let ttl = self.lease.as_ref().map_or(Duration::ZERO, PooledLease::ttl);
        (ttl / 3).max(Duration::from_millis(100))
    }

    /// Confirms our key still exists and finds whom we wait for. A
    /// member-local read, current as of `min_rev`, answers a wait; a turn
    /// that it shows, or a member that lags, takes a linearizable read.
    async fn read_turn(&self, rev: i64, min_rev: i64) -> Result<Turn> {
        let local = self.read_turn_at(rev, true).await?;
        if header_rev(&local) >= min_rev
            && let Turn::Waiting = self.turn_from(&local, rev)?
        {
            return Ok(Turn::Waiting);
        }
        self.confirm_turn(rev).await
    }

    /// Our turn as a linearizable read shows it: a grant that holds now.
    /// (Built with [`MUTANT_UNCONFIRMED_TURN`], it reads member-local
    /// state instead, a defect the tests must catch.)
    async fn confirm_turn(&self, rev: i64) -> Result<Turn> {
        let resp = self.read_turn_at(rev, MUTANT_UNCONFIRMED_TURN).await?;
        self.turn_from(&resp, rev)
    }

    /// Our turn as the answer of [`Self::read_turn_at`] shows it; our key
    /// gone is `LeaseLost`.
    fn turn_from(&self, resp: &TxnResponse, rev: i64) -> Result<Turn> {
        if !resp.succeeded() {
            return Err(self.gone());
        }
        let ops = resp.op_responses();
        Ok(if self.waits_for(ahead_of(kvs(&ops, 0), rev))?.is_empty() {
            Turn::Ours(header_rev(resp))
        } else {
            Turn::Waiting
        })
    }

    /// One Txn: if our key still has revision `rev`, get the keys older
    /// than it that decide our turn (the newest of them for a lock, all of
    /// them for a shared entry).
    async fn read_turn_at(&self, rev: i64, serializable: bool) -> Result<TxnResponse> {
        let mut ahead = match self.access {
            None => GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1),
            Some(_) => oldest_first(),
        }
        .with_max_create_revision(rev - 1);
        if serializable {
            ahead = ahead.with_serializable();
        }
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                rev,
            )])
            .and_then([TxnOp::get(self.queue.clone(), Some(ahead))]);
        let op = format!("check the queue position of {}", self.what);
        self.txn(&op, txn).await
    }

    async fn txn(&self, op: &str, txn: Txn) -> Result<TxnResponse> {
        Ok(self.txn_by(op, txn, None).await?.0)
    }

    /// The answer, and how many attempts it took (more than one: an
    /// earlier attempt may still be applied later).
    async fn txn_by(&self, op: &str, txn: Txn, by: Option<Instant>) -> Result<(TxnResponse, u32)> {
        self.inner
            .rpc
            .call_by(op, Retry::Idempotent, by, |client, attempt| {
                let txn = txn.clone();
                async move { Ok((client.kv_client().txn(txn).await?, attempt)) }
            })
            .await
    }

    /// Leaves the queue now: revokes our lease, which deletes our key.
    /// Waits until `by` at most; a revoke still running then goes on in
    /// the background (and the key expires with the lease regardless).
    async fn leave(&mut self, by: Instant) {
        if let Some(lease) = self.lease.take() {
            let rpc = self.inner.rpc.clone();
            let revoke = tokio::spawn(async move { lease.revoke(&rpc).await });
            let _ = timeout_at(by, revoke).await;
        }
    }

    fn won(mut self, rev: i64, seen_at: i64) -> Won {
        let lease = self
            .lease
            .take()
            .expect("the entry holds its lease until it is won");
        Won {
            key: std::mem::take(&mut self.key),
            rev,
            seen_at,
            lease,
            reusable: !self.retried,
        }
    }

    fn lease_id(&self) -> i64 {
        self.lease.as_ref().map_or(0, PooledLease::id)
    }

    fn gone(&self) -> Error {
        Error::new(
            ErrorKind::LeaseLost,
            format!(
                "{}: our queue key {} is gone while we waited: its lease expired or was revoked \
                 (etcd issue 11456); acquire again",
                self.what, self.key
            ),
        )
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if self.written {
            tracing::debug!(
                key = self.key,
                "leaving the queue: revoking the entry's lease"
            );
            self.inner.pool.revoke_in_background(vec![lease]);
        } else {
            self.inner.pool.put(lease);
        }
    }
}

/// The outcome of reading our place in the queue.
enum Turn {
    /// Nothing ahead blocks us: the lock is ours (seen at this revision).
    Ours(i64),
    /// Entries ahead still block us.
    Waiting,
}

/// When to read the queue next while the view's watch may still be
/// unsynced, if it may.
fn young_recheck(view: &Subscription) -> Option<Instant> {
    let created = view.young_since()?;
    let now = Instant::now();
    UNSYNCED_RECHECKS
        .iter()
        .map(|offset| created + *offset)
        .find(|at| *at > now)
}

/// A whole queue in order: the holder first, then the waiters.
pub(crate) fn oldest_first() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// The oldest key of a queue: the holder.
pub(crate) fn first_created() -> GetOptions {
    oldest_first().with_limit(1)
}

/// Reads `queue` as `options` says (see [`oldest_first`] and
/// [`first_created`]): one range read, retried, errors naming `op`.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub(crate) async fn read(
    inner: &Inner,
    op: &str,
    queue: &str,
    options: GetOptions,
) -> Result<GetResponse> {
    inner
        .rpc
        .call(op, Retry::Idempotent, |client, _| {
            let (queue, options) = (queue.to_owned(), options.clone());
            async move { client.kv_client().get(queue, Some(options)).await }
        })
        .await
}

/// The keys of `kvs` created before revision `rev`, oldest first.
fn ahead_of(kvs: &[KeyValue], rev: i64) -> Vec<QueueEntry<'_>> {
    let mut ahead: Vec<QueueEntry<'_>> = kvs
        .iter()
        .filter(|kv| kv.create_revision() < rev)
        .map(|kv| QueueEntry {
            key: kv.key_str().unwrap_or_default(),
            rev: kv.create_revision(),
            value: kv.value(),
        })
        .collect();
    ahead.sort_by_key(|entry| entry.rev);
    ahead
}

fn header_rev(resp: &TxnResponse) -> i64 {
    resp.header().map_or(0, |h| h.revision())
}

fn kvs(ops: &[TxnOpResponse], at: usize) -> &[KeyValue] {
    match ops.get(at) {
        Some(TxnOpResponse::Get(get)) => get.kvs(),
        _ => &[],
    }
}

fn first_kv(ops: &[TxnOpResponse], at: usize) -> Option<&KeyValue> {
    kvs(ops, at).first()
}
