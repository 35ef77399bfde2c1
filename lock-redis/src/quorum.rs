//! Collecting answers from N servers only until the outcome is decided.
//!
//! A Redlock operation needs a majority. Waiting for every server would
//! make one silent server (a partition, a paused process) stall every
//! operation for the full request timeout, long enough for renewals to miss
//! their deadline. So the caller continues as soon as the answers so far
//! decide the outcome, and the stragglers finish in the background (a late
//! release or renewal still lands, a late grant is cleaned up by the
//! owner-checked release).
//!
//! Every call is polled once, which sends its command, before any answer
//! is looked at. Commands to one server then run in the order the caller
//! issued them: the release that undoes a failed round always runs before
//! the next round's grant, which has the same owner id and which it would
//! otherwise delete. (Spawning each call as a task did not ensure that: a
//! task may wait unpolled on a stalled worker thread while the caller goes
//! on on another.)

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use distlock_core::Result;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// Runs every call and returns the answers gathered until `decided` says
/// the rest cannot change the outcome (or all answered). Calls that have
/// not answered by then go on in the background.
///
/// # Cancel safety
///
/// Every call has been sent once the first poll returns; dropping the
/// future later drops the unanswered calls, whose commands may still run.
pub(crate) async fn gather<T, F>(
    calls: Vec<F>,
    decided: impl Fn(&[Result<T>]) -> bool,
) -> Vec<Result<T>>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let mut answers = Vec::with_capacity(calls.len());
    let mut running: FuturesUnordered<Pin<Box<F>>> = FuturesUnordered::new();
    for call in calls {
        let mut call = Box::pin(call);
        match futures::poll!(call.as_mut()) {
            Poll::Ready(answer) => answers.push(answer),
            Poll::Pending => running.push(call),
        }
    }
    while !decided(&answers) {
        match running.next().await {
            Some(answer) => answers.push(answer),
            None => break,
        }
    }
    if !running.is_empty() {
        distlock_core::raw::spawn_background(
            async move { while running.next().await.is_some() {} },
        );
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A call that counts itself as sent when first polled, as a Redis
    /// command is, and answers at once.
    async fn call(sent: Arc<AtomicUsize>) -> Result<()> {
        sent.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// A vote decided by its first answer has still sent every call when
    /// it returns, even if the thread that started it stalls meanwhile (a
    /// descheduled worker): a caller's next command to a server must never
    /// overtake this one's. An undone Redlock round's release overtaken by
    /// the next round's grant, both under one owner id, deletes that grant.
    #[test]
    fn a_decided_vote_has_sent_every_call() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let sent = Arc::new(AtomicUsize::new(0));
        let calls = (0..5).map(|_| call(sent.clone())).collect();
        let counted = sent.clone();
        let sent_when_decided = runtime.block_on(async {
            tokio::spawn(async move {
                let mut vote = std::pin::pin!(gather(calls, |answers: &[Result<()>]| {
                    !answers.is_empty()
                }));
                if futures::poll!(vote.as_mut()).is_pending() {
                    // This worker stalls while the other one runs what it can.
                    std::thread::sleep(Duration::from_millis(200));
                    vote.await;
                }
                counted.load(Ordering::SeqCst)
            })
            .await
            .unwrap()
        });
        assert_eq!(
            sent_when_decided, 5,
            "calls left unsent when the vote returned"
        );
    }
}
