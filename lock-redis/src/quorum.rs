//! Collecting answers from N servers only until the outcome is decided.
//!
//! A Redlock operation needs a majority. Waiting for every server would
//! make one silent server (a partition, a paused process) stall every
//! operation for the full request timeout, long enough for renewals to miss
//! their deadline. So each server's call runs as its own task, and the
//! caller continues as soon as the answers so far decide the outcome; the
//! stragglers finish in the background (a late release or renewal still
//! lands, a late grant is cleaned up by the owner-checked release).

use std::future::Future;

use distlock_core::{Error, Result};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// Runs every call and returns the answers gathered until `decided` says
/// the rest cannot change the outcome (or all answered). With one call it
/// is simply awaited.
pub(crate) async fn gather<T, F>(
    calls: Vec<F>,
    decided: impl Fn(&[Result<T>]) -> bool,
) -> Vec<Result<T>>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    if calls.len() == 1 {
        let mut answers = Vec::with_capacity(1);
        for call in calls {
            answers.push(call.await);
        }
        return answers;
    }
    let mut running: FuturesUnordered<_> = calls.into_iter().map(tokio::spawn).collect();
    let mut answers = Vec::with_capacity(running.len());
    while let Some(joined) = running.next().await {
        answers.push(
            joined.unwrap_or_else(|e| Err(Error::backend(format!("server call task failed: {e}")))),
        );
        if decided(&answers) {
            break;
        }
    }
    answers
}

/// The decision rule of a vote where `yes` counts answers in favour: it is
/// decided once `quorum` said yes, or once so many did not that `quorum`
/// is out of reach.
pub(crate) fn vote_decided<T>(
    servers: usize,
    quorum: usize,
    yes: impl Fn(&Result<T>) -> bool,
) -> impl Fn(&[Result<T>]) -> bool {
    move |answers| {
        let ayes = answers.iter().filter(|a| yes(a)).count();
        let others = answers.len() - ayes;
        ayes >= quorum || others > servers - quorum
    }
}
