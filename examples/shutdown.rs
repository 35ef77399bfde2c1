//! A service that shuts down cleanly on Ctrl-C (or SIGTERM on Unix): it
//! stops its workers, releases its own lock, then waits for the releases its
//! workers' dropped guards started in the background, so that no lock is
//! left to run out its TTL.
//!
//! ```text
//! cargo run --example shutdown                                    # then press Ctrl-C
//! DISTLOCK_URL=file:///tmp/distlock-demo cargo run --example shutdown
//! ```
//!
//! Returning from `main` drops the Tokio runtime and every task it has not
//! finished, the background releases among them: hence
//! `distlock::wait_for_background` before returning.

use std::future::Future;
use std::time::Duration;

use distlock::prelude::*;
use tokio::task::JoinSet;

const WORKERS: usize = 3;
/// How long shutdown waits for background releases; what is left after
/// that is freed by its TTL.
const DRAIN: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_url("memory://").overlay(Config::from_env()?);
    let backend = distlock::connect_with(&config).await?;
    let shutdown = shutdown_signal()?;

    // One instance serves at a time: it holds this lock while it runs.
    let primary = backend
        .lock_timeout("examples/service/primary", Duration::from_secs(30))
        .await?;
    let mut workers = JoinSet::new();
    for worker in 0..WORKERS {
        workers.spawn(work(backend.clone(), worker));
    }
    println!(
        "serving with token {}; press Ctrl-C to stop",
        primary.token()
    );

    tokio::select! {
        () = shutdown => println!("shutting down"),
        reason = primary.lost() => println!("lost the primary lock ({reason}); stopping"),
    }
    // Aborting the workers drops their futures: a held job lock is released
    // in the background, a waiting acquisition gives up its place there.
    workers.shutdown().await;
    match primary.release().await {
        Ok(()) => println!("released the primary lock"),
        Err(e) => println!("releasing the primary lock: {e}"),
    }
    let drained = distlock::wait_for_background(DRAIN).await;
    println!("background releases finished: {drained}");
    Ok(())
}

/// One worker: takes the shared job lock in turn with the others, works a
/// little while holding it, releases it, and starts over.
async fn work(backend: Backend, worker: usize) {
    loop {
        match backend.lock("examples/service/jobs").await {
            Ok(job) => {
                tokio::time::sleep(Duration::from_millis(50)).await; // the job
                if let Err(e) = job.release().await {
                    eprintln!("worker {worker}: release: {e}");
                }
            }
            Err(e) => {
                eprintln!("worker {worker}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Resolves on Ctrl-C, or on SIGTERM (what service managers send) on Unix.
///
/// The Unix handlers are installed here, not when the future is first
/// polled (as `tokio::signal::ctrl_c()` does), so a signal that comes while
/// the service starts up is not missed.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
