//! The operator's view of a lock: its holder and waiters, and breaking it.
//!
//! Everything comes from the lock's queue: the oldest key holds, the others
//! wait in `create_revision` order, and each key's value is the
//! description its contender stored (empty for etcd's own `etcdctl lock`).
//! The holder's lease, found on its key, says how long the lock would stay
//! held if the holder died now.
//!
//! A name is looked up as a lock first and as an election if its lock is
//! free, so an operator can inspect and break a leader by the election's
//! name. An election key's value is the leader's published value.

use std::time::Duration;

use distlock_core::{
    Error, FencingToken, HolderInfo, LockName, LockStatus, Primitive, Result, WaiterInfo,
};
use etcd_client::TxnOpResponse;
use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};

use crate::backend::Inner;
use crate::keys::Space;
use crate::queue;
use crate::rpc::Retry;

/// How often `force_release` tries again when the holder it read left
/// before its delete, before it gives up.
const BREAK_TRIES: usize = 8;

/// The spaces a name is looked up in, in order, with what each is.
const SPACES: [(Space, Primitive); 2] = [
    (Space::Lock, Primitive::Lock),
    (Space::Election, Primitive::Election),
];

/// The holder and waiters of lock `name`, or of its election when the lock
/// is free: one range read of a queue, oldest first, and one lease read for
/// the holder.
pub(crate) async fn inspect(inner: &Inner, name: &LockName) -> Result<LockStatus> {
    for (space, primitive) in SPACES {
        if let Some(status) = inspect_in(inner, space, primitive, name).await? {
            return Ok(status);
        }
    }
    Ok(LockStatus::free(name.clone()))
}

/// The status of `name` in `space`; `None` when nobody holds it there.
async fn inspect_in(
    inner: &Inner,
    space: Space,
    primitive: Primitive,
    name: &LockName,
) -> Result<Option<LockStatus>> {
    let queue = inner.keys.queue(space, name);
    let op = format!("inspect {} {:?}", space.noun(), name.as_str());
    let resp = queue::read(inner, &op, &queue, queue::oldest_first()).await?;
    let mut entries = resp.kvs().iter();
    let Some(holder) = entries.next() else {
        return Ok(None);
    };
    let lease_left = lease_left(inner, holder.lease()).await?;
    let waiters: Vec<WaiterInfo> = entries
        .map(|kv| WaiterInfo {
            key: Some(key_text(kv)),
            description: description(kv.value()),
        })
        .collect();
    Ok(Some(LockStatus {
        name: name.clone(),
        primitive,
        holder: Some(holder_info(holder, lease_left)),
        waiting: waiters.len(),
        waiters,
    }))
}

/// Breaks lock `name`, or its election's leadership when the lock is free.
pub(crate) async fn force_release(inner: &Inner, name: &LockName) -> Result<Option<HolderInfo>> {
    for (space, _) in SPACES {
        if let Some(evicted) = force_release_in(inner, space, name).await? {
            return Ok(Some(evicted));
        }
    }
    Ok(None)
}

/// Deletes the holder's key of `name` in `space` (only that key: its
/// lease, which may carry other keys of a Go session, lives on), and says
/// who it was.
async fn force_release_in(
    inner: &Inner,
    space: Space,
    name: &LockName,
) -> Result<Option<HolderInfo>> {
    let queue = inner.keys.queue(space, name);
    let op = format!("break {} {:?}", space.noun(), name.as_str());
    let oldest = queue::first_created();
    let resp = queue::read(inner, &op, &queue, oldest.clone()).await?;
    let mut holder = resp.kvs().first().cloned();
    for _ in 0..BREAK_TRIES {
        let Some(target) = holder else {
            return Ok(None);
        };
        // Delete exactly the key we read, at its create revision; if it
        // has gone meanwhile, the Else branch shows who holds now.
        let txn = Txn::new()
            .when([Compare::create_revision(
                target.key(),
                CompareOp::Equal,
                target.create_revision(),
            )])
            .and_then([TxnOp::delete(target.key(), None)])
            .or_else([TxnOp::get(queue.clone(), Some(oldest.clone()))]);
        let delete = inner.rpc.call(&op, Retry::Idempotent, |client, attempt| {
            let txn = txn.clone();
            async move { Ok((client.kv_client().txn(txn).await?, attempt)) }
        });
        // The holder's lease outlives the delete: read it meanwhile.
        let (deleted, left) = tokio::join!(delete, lease_left(inner, target.lease()));
        let (resp, attempt) = deleted?;
        // A retry that finds the key gone most likely follows an attempt
        // that deleted it: the target is gone either way, and the holder
        // after it must not be evicted by a request meant for another.
        if resp.succeeded() || attempt > 1 {
            let left = left.unwrap_or_else(|e| {
                tracing::debug!(error = %e, "could not read the evicted holder's lease");
                None
            });
            let evicted = holder_info(&target, left);
            tracing::info!(lock = %name, space = space.noun(), token = evicted.token.get(), key = evicted.key, "etcd lock broken");
            return Ok(Some(evicted));
        }
        holder = match resp.op_responses().first() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
            _ => None,
        };
    }
    Err(Error::unavailable(format!(
        "{} {:?} at etcd {} changed hands {BREAK_TRIES} times while it was being broken; \
         try again",
        space.noun(),
        name.as_str(),
        inner.rpc.endpoints()
    )))
}

/// The time left on lease `id`: `None` for a key without a lease, zero
/// once the lease is gone.
async fn lease_left(inner: &Inner, id: i64) -> Result<Option<Duration>> {
    if id == 0 {
        return Ok(None);
    }
    let left = crate::lease::time_left(&inner.rpc, id).await?;
    Ok(Some(left.unwrap_or(Duration::ZERO)))
}

fn holder_info(kv: &KeyValue, lease_left: Option<Duration>) -> HolderInfo {
    HolderInfo {
        key: key_text(kv),
        token: FencingToken(u64::try_from(kv.create_revision()).unwrap_or(0)),
        description: description(kv.value()),
        // etcd keeps no time with a key, and a waiter that became holder
        // wrote its key when it joined the queue, not when it got the lock.
        acquired_at: None,
        lease_left,
    }
}

/// A contender's description: its key's value, if it stored one.
fn description(value: &[u8]) -> Option<String> {
    (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned())
}

fn key_text(kv: &KeyValue) -> String {
    String::from_utf8_lossy(kv.key()).into_owned()
}
