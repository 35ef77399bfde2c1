//! What distlock-core itself keeps in memory for each held lock: the guard,
//! its validity, its lost signal and its place in the renewal schedule.
//!
//! A process may hold tens of thousands of locks, so this is a budget, not
//! a detail. The heap is counted exactly by a counting allocator around the
//! system one (this test binary's only test, so nothing else allocates
//! meanwhile); the lease is a zero-sized stand-in, so what is counted is
//! distlock-core's share and nothing of any backend's.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::raw::{Grant, Lease, Renewer, SentAt};
use distlock_core::{LockGuard, LockName, Result};

/// Counts the bytes and blocks the program holds on the heap.
struct Counting;

static BYTES: AtomicI64 = AtomicI64::new(0);
static BLOCKS: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as i64, Ordering::SeqCst);
        BLOCKS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(layout.size() as i64, Ordering::SeqCst);
        BLOCKS.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A lease that renews and releases without keeping anything.
#[derive(Debug)]
struct Free;

#[async_trait]
impl Lease for Free {
    async fn renew(&self) -> Result<()> {
        Ok(())
    }

    async fn release(&self) -> Result<()> {
        Ok(())
    }
}

const LOCKS: usize = 2_000;

/// distlock-core's budget per held lock, in heap bytes. The lock's name and
/// key strings are included; a backend adds its own state on top.
const BUDGET: i64 = 640;

/// A lock held as a backend holds it: its lease renewed on the backend's
/// one schedule.
fn held(renewer: &Renewer, name: &LockName, token: u64) -> LockGuard {
    let grant = Grant::new(
        name.clone(),
        token,
        "k",
        Duration::from_secs(30),
        SentAt::now(),
    )
    .renewed_by(renewer);
    distlock_core::raw::leased_guard(grant, Free).expect("a fresh grant")
}

#[tokio::test(flavor = "current_thread")]
async fn a_held_lock_costs_lock_core_at_most_its_budget() {
    let names: Vec<LockName> = (0..LOCKS)
        .map(|i| LockName::new(format!("memory/{i}")).unwrap())
        .collect();
    let renewer = Renewer::new();
    let mut guards = Vec::with_capacity(LOCKS);
    // The first lock pays for what all share (the schedule's driver task,
    // the timer wheel's first levels): not counted.
    guards.push(held(&renewer, &names[0], 0));
    tokio::task::yield_now().await;
    let (bytes, blocks) = (BYTES.load(Ordering::SeqCst), BLOCKS.load(Ordering::SeqCst));
    for (token, name) in names.iter().enumerate().skip(1) {
        guards.push(held(&renewer, name, token as u64));
    }
    // Let every renewal start waiting, as it does while the locks are held.
    tokio::task::yield_now().await;
    let count = (LOCKS - 1) as i64;
    let per_lock = (BYTES.load(Ordering::SeqCst) - bytes) / count;
    let blocks_per_lock = (BLOCKS.load(Ordering::SeqCst) - blocks) / count;
    assert!(
        per_lock <= BUDGET,
        "a held lock keeps {per_lock} B in {blocks_per_lock} heap blocks in distlock-core; \
         the budget is {BUDGET} B"
    );
    for guard in guards {
        guard.release().await.expect("released");
    }
}
