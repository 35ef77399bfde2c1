//! One run of the acquire script on one server: the lock's (locks and
//! elections) or the shared primitives' (semaphores and read-write locks).

use distlock_core::raw::check_limit_agrees;
use distlock_core::{Access, Error, LockName, Result};

use crate::node::Node;
use crate::scripts::SCRIPTS;
use crate::servers::{Request, millis};

/// What the acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// We hold the lock on this server; the server's fencing counter value.
    Acquired(u64),
    /// Someone else holds it (or it is another waiter's turn).
    Busy {
        /// Milliseconds until the holder's lease (or the head waiter's
        /// entry) runs out; negative if unknown.
        wait_ms: i64,
        /// The server's fencing counter when it answered: a hand-over
        /// message with a token up to this is stale.
        fence: u64,
    },
}

/// How to run the script.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mode<'a> {
    /// Our owner id for this acquisition.
    pub(crate) owner: &'a str,
    /// Our waiter id, or `""` when not queueing.
    pub(crate) waiter: &'a str,
    /// Join (or refresh our place in) the queue when the lock is taken.
    pub(crate) enqueue: bool,
    /// Register (or refresh) our waiter id outside the queue when the lock
    /// is taken, so operators see us waiting (Redlock, whose waiters race).
    pub(crate) register: bool,
    /// Honour the queue (single server); Redlock ignores it.
    pub(crate) fair: bool,
    /// Publish an election's leader record at once (single server); Redlock
    /// confirms it after reaching the quorum.
    pub(crate) confirmed: bool,
}

/// Runs the acquire script on `node`. The returned future borrows nothing.
pub(crate) fn run(
    node: &Node,
    request: &Request<'_>,
    mode: Mode<'_>,
) -> impl Future<Output = Result<Outcome>> + Send + 'static + use<> {
    let keys = &request.keys;
    let ttl_ms = millis(request.ttl).to_string();
    let mut flags = String::with_capacity(4);
    for (on, flag) in [
        (mode.enqueue, 'q'),
        (mode.register, 'w'),
        (mode.fair, 'f'),
        (mode.confirmed, 'c'),
    ] {
        if on {
            flags.push(flag);
        }
    }
    // What a shared acquisition asks for, as the scripts store it.
    let tag = match request.access {
        Access::Permit(limit) => limit.to_string(),
        access => access.as_str().to_owned(),
    };
    let mut args = vec![
        mode.owner.as_bytes(),
        ttl_ms.as_bytes(),
        mode.waiter.as_bytes(),
        flags.as_bytes(),
        request.about.as_bytes(),
    ];
    let (script, key_list) = if keys.space.is_shared() {
        args.extend([tag.as_bytes(), keys.wake_prefix.as_bytes()]);
        (&SCRIPTS.shared_acquire, keys.shared_state().to_vec())
    } else {
        let mut key_list = keys.state().to_vec();
        if let Some(value) = request.value {
            key_list.push(&keys.leader);
            args.extend([value, keys.leader_channel.as_bytes()]);
        }
        (&SCRIPTS.acquire, key_list)
    };
    let what = format!("acquiring {}", request.subject());
    let call = node.eval::<Vec<i64>>(script, &key_list, &args, &what);
    let (backend, addr) = (node.backend(), node.addr().to_owned());
    let (name, access) = (request.name.clone(), request.access);
    async move {
        match call.await?[..] {
            [1, token] => Ok(Outcome::Acquired(u64::try_from(token).unwrap_or(0))),
            [0, wait_ms, fence] => Ok(Outcome::Busy {
                wait_ms,
                fence: u64::try_from(fence).unwrap_or(0),
            }),
            [2, theirs] => Err(limit_disagrees(&name, access, theirs, backend, &addr)),
            ref other => Err(Error::backend(format!(
                "{backend} at {addr}: {what}: unexpected reply {other:?} from the acquire script; were keys of the lock deleted or evicted meanwhile?"
            ))),
        }
    }
}

/// The `InvalidConfig` of a permit whose limit differs from the `theirs`
/// that the held or queued permits agree on, worded as distlock-core words it.
fn limit_disagrees(
    name: &LockName,
    access: Access,
    theirs: i64,
    backend: &str,
    addr: &str,
) -> Error {
    let stored = u32::try_from(theirs)
        .ok()
        .and_then(|n| Access::permit(n).ok());
    match stored.map(|theirs| check_limit_agrees(name, access, &[theirs])) {
        Some(Err(e)) => e,
        _ => Error::backend(format!(
            "{backend} at {addr}: the acquire script of semaphore {name} refused {} for a stored limit of {theirs}, which agrees or is no limit; was its limit key changed by hand?",
            access.describe(name)
        )),
    }
}
