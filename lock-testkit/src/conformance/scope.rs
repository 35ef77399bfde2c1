//! Properties of releasing at the end of a scope: `with_lock` releases
//! before it returns, and the clean-up started by dropping a guard or an
//! acquisition completes when the program waits for background work before
//! its runtime shuts down.

use distlock_core::{ErrorKind, LockBackendExt};

use super::{SLACK, Target, within};

/// `with_lock` runs the work under the lock and releases it before
/// returning: another client gets the lock at once, with a higher token.
pub async fn with_lock_releases_before_returning(target: &dyn Target) {
    let name = "conformance/scope";
    let a = target.client().await;
    let b = target.client().await;
    let (token, held_inside) = within(
        target.ttl() + SLACK,
        "with_lock",
        a.with_lock(name, |held| async move { (held.token(), held.is_held()) }),
    )
    .await
    .expect("with_lock");
    assert!(held_inside, "the work ran without the lock");
    let next = b
        .try_lock(name)
        .await
        .expect("free at once after with_lock returned");
    assert!(next.token() > token, "{} <= {token}", next.token());
    next.release().await.expect("release");
}

/// A program whose runtime shuts down right after it finishes with its
/// locks: a lock held through `with_lock`, and a dropped guard followed by
/// `wait_for_background`, are both free at once afterwards.
pub async fn release_completes_before_a_runtime_shuts_down(target: &dyn Target) {
    let (scoped, dropped) = ("conformance/exit-scoped", "conformance/exit-dropped");
    in_an_exiting_program(async {
        let client = target.client().await;
        client
            .with_lock(scoped, |_| async {})
            .await
            .expect("with_lock");
        let guard = client.lock(dropped).await.expect("lock");
        drop(guard);
        assert!(
            distlock_core::wait_for_background(SLACK).await,
            "the background release did not finish"
        );
    });
    let next = target.client().await;
    for name in [scoped, dropped] {
        match next.try_lock(name).await {
            Ok(guard) => guard.release().await.expect("release"),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                panic!("{name} was still held after the program ended: {e}")
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

/// A program interrupted while waiting (its acquisition dropped) waits for
/// background work and exits: its queue place is gone, so the next waiter
/// gets the lock as soon as the holder releases, not a TTL later.
pub async fn cancelled_waiter_in_an_exiting_program_gives_up_its_place(target: &dyn Target) {
    let name = "conformance/exit-waiter";
    let holder = target.client().await;
    let held = holder.lock(name).await.expect("lock");
    in_an_exiting_program(async {
        let client = target.client().await;
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(200), client.lock(name)).await;
        assert!(
            waited.is_err(),
            "the waiter must still be waiting when interrupted"
        );
        assert!(
            distlock_core::wait_for_background(SLACK).await,
            "giving up the queue place did not finish"
        );
    });
    let next = target.client().await;
    let waiting = tokio::spawn(async move {
        let guard = next.lock(name).await;
        (guard, tokio::time::Instant::now())
    });
    // Let the next waiter queue behind whatever is left of the first.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    held.release().await.expect("release");
    let released = tokio::time::Instant::now();
    let (guard, acquired) = within(target.ttl() + SLACK, "the next waiter", waiting)
        .await
        .expect("waiter task");
    let waited = acquired - released;
    assert!(
        waited < target.ttl() / 4,
        "the next waiter got the lock {waited:?} after the release: the interrupted waiter's \
         place was still held (TTL {:?})",
        target.ttl()
    );
    guard.expect("lock").release().await.expect("release");
}

/// Runs `program` on a runtime of its own and shuts that runtime down right
/// after, as the end of `main` does: its unfinished tasks are dropped.
fn in_an_exiting_program(program: impl std::future::Future<Output = ()>) {
    tokio::task::block_in_place(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the exiting program");
        runtime.block_on(program);
        drop(runtime);
    });
}
