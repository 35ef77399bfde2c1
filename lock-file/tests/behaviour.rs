//! File-backend specifics the conformance suite does not cover: tokens that
//! survive a restart of every client, bad directories, cancelled attempts.

use std::time::Duration;

use lock_core::{ErrorKind, LockBackendExt};
use lock_file::{FileBackend, FileConfig};

async fn backend(dir: &std::path::Path) -> FileBackend {
    FileBackend::connect(FileConfig::new(dir))
        .await
        .expect("connect")
}

#[tokio::test]
async fn tokens_keep_increasing_after_every_client_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let a = backend(dir.path()).await;
        let guard = a.lock("restart").await.unwrap();
        let token = guard.token();
        guard.release().await.unwrap();
        token
    };
    let b = backend(dir.path()).await;
    let guard = b.lock("restart").await.unwrap();
    assert!(guard.token() > first, "{} after {first}", guard.token());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn unwritable_directory_is_a_typed_error() {
    let err = FileBackend::connect(FileConfig::new("/proc/distlock-cannot-exist"))
        .await
        .expect_err("cannot create a directory in /proc");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Backend | ErrorKind::Unauthorized | ErrorKind::Unavailable
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("/proc/distlock-cannot-exist"),
        "{err}"
    );
}

#[tokio::test]
async fn relative_directory_is_invalid_config() {
    let err = FileBackend::connect(FileConfig::new("relative/dir"))
        .await
        .expect_err("relative");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

#[tokio::test]
async fn try_lock_reports_would_block_naming_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (backend(dir.path()).await, backend(dir.path()).await);
    let held = a.lock("jobs/x").await.unwrap();
    let err = b.try_lock("jobs/x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert!(err.to_string().contains("jobs/x"), "{err}");
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_attempts_never_leave_the_lock_taken() {
    let dir = tempfile::tempdir().unwrap();
    let a = backend(dir.path()).await;
    // Cancel acquisitions at every stage of an attempt, including while the
    // blocking write is in flight; none may leave the lock held.
    for i in 0..50u64 {
        let cancel_after = Duration::from_micros(i * 40);
        let _ = tokio::time::timeout(cancel_after, a.lock("cancel")).await;
    }
    let b = backend(dir.path()).await;
    let guard = tokio::time::timeout(Duration::from_secs(5), b.lock("cancel"))
        .await
        .expect("a cancelled attempt left the lock taken")
        .expect("lock");
    guard.release().await.unwrap();
}
