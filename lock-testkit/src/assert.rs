//! Assertions the tests of every crate share: an error of the expected
//! kind, a future or a spawned task that must finish within a bound
//! instead of hanging, a grant that must be there (a free lock, a leader,
//! an evicted holder) and the operator's view reaching an expected state.

use std::fmt::Debug;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, ElectionBackend, Error, ErrorKind, FencingToken, HolderInfo, LeaderInfo,
    ListedLock, LockBackend, LockGuard, LockName, LockStatus, Primitive, Result,
};
use futures::{Stream, StreamExt};
use tokio::task::JoinHandle;

/// The error `result` must have failed with, of `kind`; `what` names what
/// should have failed.
#[track_caller]
pub fn fails_with<T: Debug>(kind: ErrorKind, what: &str, result: Result<T>) -> Error {
    let err = result.expect_err(what);
    assert_eq!(err.kind(), kind, "{what}: {err}");
    err
}

/// Awaits `fut`, panicking with `what` if it takes longer than `bound`.
pub async fn within<T>(bound: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(bound, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: did not happen within {bound:?}"),
    }
}

/// Awaits `fut`, which must fail with `kind` within `bound`; `what` names
/// what should have failed.
pub async fn fails_within<T: Debug>(
    bound: Duration,
    kind: ErrorKind,
    what: &str,
    fut: impl Future<Output = Result<T>>,
) -> Error {
    fails_with(kind, what, within(bound, what, fut).await)
}

/// What `launch` started (a server, a cluster), or a panic with the
/// launcher's message, which names the package to install when a binary is
/// missing.
pub async fn started<T, E: std::fmt::Display>(
    launch: impl Future<Output = std::result::Result<T, E>>,
) -> T {
    launch.await.unwrap_or_else(|e| panic!("{e}"))
}

/// The error `result` must have failed with, of one of `kinds` (where the
/// contract allows either, as `NotHeld` or `LeaseLost` for a lost lock).
#[track_caller]
pub fn fails_with_one_of<T: Debug>(kinds: &[ErrorKind], what: &str, result: Result<T>) -> Error {
    let err = result.expect_err(what);
    assert!(
        kinds.contains(&err.kind()),
        "{what}: {err}; expected one of {kinds:?}"
    );
    err
}

/// The next item of `stream` within `bound`, which must be there and `Ok`
/// (a leader an observer must see, say); `what` names it.
pub async fn next_ok<T, S>(bound: Duration, what: &str, stream: &mut S) -> T
where
    S: Stream<Item = Result<T>> + Unpin,
{
    within(bound, what, stream.next())
        .await
        .unwrap_or_else(|| panic!("{what}: the stream ended"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What the spawned `task` returned, within `bound`; panics naming `what`
/// if it takes longer or the task panicked.
pub async fn joined<T>(bound: Duration, what: &str, task: JoinHandle<T>) -> T {
    within(bound, what, task)
        .await
        .unwrap_or_else(|e| panic!("{what}: the task failed: {e}"))
}

/// `client` acquiring `lock` with `options` in a spawned task: a waiter to
/// queue behind a holder, awaited later with [`joined`].
pub fn spawn_acquire<B: LockBackend>(
    client: B,
    lock: &LockName,
    options: AcquireOptions,
) -> JoinHandle<Result<LockGuard>> {
    let lock = lock.clone();
    tokio::spawn(async move { client.acquire(&lock, &options).await })
}

/// Takes the lock `acquire` returns and gives it back at once: proves that
/// the lock could be had right then (`what` says why it should be).
pub async fn acquired_and_released(what: &str, acquire: impl Future<Output = Result<LockGuard>>) {
    let guard = acquire.await.unwrap_or_else(|e| panic!("{what}: {e}"));
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{what}: release: {e}"));
}

/// Polls `inspect` every 20 ms until `done` holds for its answer, or panics
/// naming `what` after `bound`.
pub async fn inspect_until<B: LockBackend + ?Sized>(
    client: &B,
    lock: &LockName,
    bound: Duration,
    what: &str,
    done: impl Fn(&LockStatus) -> bool,
) -> LockStatus {
    within(bound, what, async {
        loop {
            let status = client.inspect(lock).await.expect("inspect");
            if done(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The holder that `operator`'s `force_release` of `lock` evicted, which
/// there must be.
pub async fn evicts<B: LockBackend + ?Sized>(operator: &B, lock: &LockName) -> HolderInfo {
    operator
        .force_release(lock)
        .await
        .unwrap_or_else(|e| panic!("force_release {lock}: {e}"))
        .unwrap_or_else(|| panic!("force_release {lock} evicted nobody"))
}

/// `later`, the token of a grant that followed one of `earlier`, must be
/// higher: the fencing contract.
#[track_caller]
pub fn token_after(earlier: FencingToken, later: FencingToken) {
    assert!(later > earlier, "token {later} is not after {earlier}");
}

/// The `primitive` entries of a listing as `(name, holder token)`, sorted:
/// what a test compares with the locks or elections it holds.
pub fn holders_listed(
    listed: &[ListedLock],
    primitive: Primitive,
) -> Vec<(&str, Option<FencingToken>)> {
    let mut holders: Vec<_> = listed
        .iter()
        .filter(|l| l.primitive == primitive)
        .map(|l| (l.name.as_str(), l.holder_token))
        .collect();
    holders.sort();
    holders
}

/// The leader of election `name` as `client` reads it, which there must
/// be; `what` names who should lead.
pub async fn leader_of<B: ElectionBackend + ?Sized>(
    client: &B,
    name: &LockName,
    what: &str,
) -> LeaderInfo {
    client
        .leader(name)
        .await
        .unwrap_or_else(|e| panic!("read the leader of {name}: {e}"))
        .unwrap_or_else(|| panic!("nobody leads {name}; expected {what}"))
}
