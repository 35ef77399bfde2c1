//! Leader election with an observer: three candidates campaign, an observer
//! prints each leader as it changes, and each leader resigns after a short
//! term so the next one takes over.
//!
//! ```text
//! cargo run --example election
//! DISTLOCK_URL=file:///tmp/distlock-demo cargo run --example election
//! ```
//!
//! Observers see the latest leader: a change that is replaced before the
//! observer looks (a quick proclaim, say) may be skipped, but leaders never
//! appear out of order.

use std::time::Duration;

use distlock::{Candidacy, Config, ElectionBackend, FencingToken, LockName};
use futures::StreamExt;
use tokio::sync::watch;

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let name = LockName::new("examples/scheduler")?;

    // The observer runs until it has seen the last leader's token.
    let (last_tx, mut last_rx) = watch::channel::<Option<FencingToken>>(None);
    let observer = distlock::connect_with(&config).await?;
    let mut leaders = observer.observe(&name).await?;
    let watcher = tokio::spawn(async move {
        let mut seen = None;
        loop {
            if seen.is_some() && *last_rx.borrow() == seen {
                return;
            }
            tokio::select! {
                next = leaders.next() => match next {
                    Some(Ok(leader)) => {
                        println!("observer: leader is {:?} (token {})", leader.value_lossy(), leader.token);
                        seen = Some(leader.token);
                    }
                    Some(Err(e)) => return println!("observer error: {e}"),
                    None => return,
                },
                _ = last_rx.changed() => {}
            }
        }
    });

    let mut candidates = Vec::new();
    for id in ["alpha", "beta", "gamma"] {
        let backend = distlock::connect_with(&config).await?;
        let name = name.clone();
        candidates.push(tokio::spawn(async move {
            let leadership = backend.campaign(&name, Candidacy::new(id)).await?;
            println!("{id}: elected with token {}", leadership.token());
            tokio::time::sleep(Duration::from_millis(100)).await;
            leadership.proclaim(format!("{id} (still leading)")).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            println!("{id}: resigning");
            let token = leadership.token();
            leadership.resign().await?;
            distlock::Result::Ok(token)
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
        .expect("observer saw the last leader")
        .expect("observer panicked");
    Ok(())
}
