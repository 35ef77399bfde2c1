//! Taking the members one by one, in canonical order, within one wait.

use std::future::Future;

use futures::future::join_all;
use tokio::time::Instant;

use super::guard::MultiLockGuard;
use super::set;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::name::LockName;
use crate::options::{AcquireOptions, Wait, check_ttl};

/// Acquires every name of the canonical set `names` with `acquire_one`,
/// all-or-nothing, with `options.wait` bounding the whole acquisition.
///
/// `acquire_one` is the per-member grant (a backend's `acquire`, or any
/// primitive's that returns a [`LockGuard`]), so other kinds of members can
/// reuse this.
///
/// # Cancel safety
///
/// Dropping the future drops the members already taken, which release in
/// the background (see [`LockGuard`]), and cancels the member being
/// acquired, as that backend's `acquire` documents.
pub(crate) async fn acquire_all<F, Fut>(
    names: Vec<LockName>,
    options: &AcquireOptions,
    mut acquire_one: F,
) -> Result<MultiLockGuard>
where
    F: FnMut(LockName, AcquireOptions) -> Fut,
    Fut: Future<Output = Result<LockGuard>>,
{
    let names = set::canonical(names)?;
    if let Some(ttl) = options.ttl {
        check_ttl(ttl)?;
    }
    let deadline = options.wait.deadline_from(Instant::now());
    let mut taken: Vec<LockGuard> = Vec::with_capacity(names.len());
    for name in &names {
        let member = options.clone().wait(remaining(options.wait, deadline));
        match acquire_one(name.clone(), member).await {
            Ok(guard) => taken.push(guard),
            Err(e) => {
                release_taken(taken).await;
                return Err(member_failed(name, &names, e));
            }
        }
    }
    Ok(MultiLockGuard::new(taken))
}

/// What is left of the caller's wait for the next member.
fn remaining(wait: Wait, deadline: Option<Instant>) -> Wait {
    match (wait, deadline) {
        (Wait::Timeout(_), Some(deadline)) => {
            Wait::Timeout(deadline.saturating_duration_since(Instant::now()))
        }
        (wait, _) => wait,
    }
}

/// Releases the members taken before one failed, so none stays held.
async fn release_taken(taken: Vec<LockGuard>) {
    for (name, result) in join_all(taken.into_iter().map(|guard| {
        let name = guard.name().clone();
        async move { (name, guard.release().await) }
    }))
    .await
    {
        if let Err(e) = result {
            tracing::debug!(lock = %name, error = %e, "releasing a multi-lock member after a failed acquisition; the TTL will free it");
        }
    }
}

/// The member's error, of the same kind, saying which member it was.
fn member_failed(name: &LockName, names: &[LockName], e: Error) -> Error {
    let context = format!("lock {name} of the multi-lock {}", set::describe(names));
    let message = format!("{}; none of the set is held", e.message());
    super::member_error(context, message, e)
}
