//! Leader election as an application writes it: three candidates campaign
//! for one name, a follower prints each leader as it changes, and each
//! leader publishes its status, then resigns after a short term so the next
//! one takes over.
//!
//! ```text
//! cargo run --example election                                    # memory
//! DISTLOCK_URL=file:///tmp/distlock-demo cargo run --example election
//! DISTLOCK_URL=etcd://127.0.0.1:2379 cargo run --features etcd --example election
//! ```
//!
//! A follower sees the latest leader: a change replaced before it looks (a
//! quick `proclaim`, say) may be skipped, but leaders never appear out of
//! order.

use std::time::Duration;

use distlock::prelude::*;
use tokio::sync::watch;

const ELECTION: &str = "examples/scheduler";

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);

    // The follower: the current leader, then every change, until it has
    // seen the last leader's token.
    let (last_tx, mut last_rx) = watch::channel::<Option<FencingToken>>(None);
    let follower = distlock::connect_with(&config).await?;
    let mut leaders = follower.follow(ELECTION).await?;
    let watcher = tokio::spawn(async move {
        let mut seen = None;
        loop {
            if seen.is_some() && *last_rx.borrow() == seen {
                return;
            }
            tokio::select! {
                next = leaders.next() => match next {
                    Some(Ok(leader)) => {
                        println!("follower: leader is {:?} (token {})", leader.value_lossy(), leader.token);
                        seen = Some(leader.token);
                    }
                    Some(Err(e)) => return println!("follower error: {e}"),
                    None => return,
                },
                _ = last_rx.changed() => {}
            }
        }
    });

    // Each candidate is a separate client, as separate processes would be.
    let mut candidates = Vec::new();
    for id in ["alpha", "beta", "gamma"] {
        let backend = distlock::connect_with(&config).await?;
        candidates.push(tokio::spawn(async move {
            // Waits until elected, publishing who we are.
            let leadership = backend.elect(ELECTION, id).await?;
            println!("{id}: elected with token {}", leadership.token());
            let current = backend.leader_of(ELECTION).await?;
            println!(
                "{id}: leader_of says {:?}",
                current.map(|l| l.value_lossy())
            );

            // Lead until the term ends, or stop at once if leadership is lost.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                reason = leadership.lost() => {
                    println!("{id}: lost leadership: {reason}");
                    return distlock::Result::Ok(leadership.token());
                }
            }
            leadership.proclaim(format!("{id} (still leading)")).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            println!("{id}: resigning");
            let token = leadership.token();
            leadership.resign().await?;
            Ok(token)
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut last = None;
    for candidate in candidates {
        let token = candidate.await.expect("candidate panicked")?;
        last = last.max(Some(token));
    }
    let _ = last_tx.send(last);
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the follower saw the last leader")
        .expect("follower panicked");
    println!("done: three terms, tokens in order");
    Ok(())
}
