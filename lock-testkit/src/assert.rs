//! Assertions the tests of every crate share: an error of the expected
//! kind, and a future that must finish within a bound instead of hanging.

use std::fmt::Debug;
use std::time::Duration;

use futures::{Stream, StreamExt};
use lock_core::{Error, ErrorKind, Result};

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
