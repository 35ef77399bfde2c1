//! What dropping a guard does where no runtime is running: the in-memory
//! backend releases at once, as a synchronous call.

use distlock_core::LockBackendExt;
use distlock_core::memory::MemoryBackend;

#[test]
fn a_guard_dropped_with_no_runtime_is_released_at_once() {
    let backend = MemoryBackend::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let guard = runtime
        .block_on(backend.lock("drop/no-runtime"))
        .expect("lock");
    let token = guard.token();
    drop(runtime);
    drop(guard);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let next = runtime
        .block_on(backend.try_lock("drop/no-runtime"))
        .expect("free at once after a drop with no runtime");
    assert!(next.token() > token);
}
