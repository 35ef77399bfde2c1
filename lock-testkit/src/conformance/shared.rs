//! Properties of semaphores and read-write locks: limits, overlap,
//! exclusion, writer preference, tokens across kinds of grant, expiry and
//! cancellation.
//!
//! Each case checks [`Capabilities::semaphore`] or
//! [`Capabilities::rwlock`] first and says so when the backend has no such
//! primitive.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    Access, AcquireOptions, Capabilities, DynLockBackend, ErrorKind, LockBackendExt, LockGuard,
    Wait,
};

use super::{SLACK, Target, within};
use crate::assert::{fails_with, joined, token_after};

/// Permits of the semaphores under test.
const LIMIT: u32 = 3;
/// Tasks per contention test, each with its own client.
const CONTENDERS: usize = 6;
/// Grants per task.
const ROUNDS: usize = 8;

fn applies(caps: &Capabilities, case: &str, access: Access) -> bool {
    if !caps.supports(access) {
        eprintln!(
            "{case}: {} has no {}; nothing to check",
            caps.backend,
            access.as_str()
        );
    }
    caps.supports(access)
}

async fn semaphores_apply(target: &dyn Target, case: &str) -> bool {
    applies(&super::capabilities_of(target).await, case, permit(LIMIT))
}

async fn rwlocks_apply(target: &dyn Target, case: &str) -> bool {
    applies(&super::capabilities_of(target).await, case, Access::Read)
}

fn permit(limit: u32) -> Access {
    Access::permit(limit).expect("a non-zero limit")
}

fn waiting() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::Timeout(Duration::from_secs(60)))
}

async fn grant(client: &DynLockBackend, name: &str, access: Access) -> LockGuard {
    client
        .shared_with(name, access, &waiting())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", access.as_str()))
}

async fn try_grant(
    client: &DynLockBackend,
    name: &str,
    access: Access,
) -> distlock_core::Result<LockGuard> {
    let options = AcquireOptions::new().wait(Wait::No);
    within(SLACK, "try", client.shared_with(name, access, &options)).await
}

/// Counts who is inside, and the most that ever were at once.
#[derive(Default)]
struct Occupancy {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Occupancy {
    fn enter(&self) -> usize {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// 6 clients take permits of a 3-permit semaphore over and over: never more
/// than 3 are inside at once, and every grant's token is new.
pub async fn semaphore_never_exceeds_its_limit_under_contention(target: &dyn Target) {
    let case = "semaphore_never_exceeds_its_limit_under_contention";
    if !semaphores_apply(target, case).await {
        return;
    }
    let name = "conformance/semaphore/contention";
    let occupancy = Arc::new(Occupancy::default());
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let client = target.client().await;
        let (occupancy, tokens) = (occupancy.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = grant(&*client, name, permit(LIMIT)).await;
                let now = occupancy.enter();
                assert!(
                    now <= LIMIT as usize,
                    "{now} permit holders inside a {LIMIT}-permit semaphore"
                );
                tokens.lock().unwrap().push(guard.token());
                tokio::time::sleep(Duration::from_millis(5)).await;
                occupancy.leave();
                guard.release().await.expect("release");
            }
        }));
    }
    super::join_within(Duration::from_secs(120), "semaphore contention", tasks).await;
    let mut tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), CONTENDERS * ROUNDS);
    tokens.sort();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        CONTENDERS * ROUNDS,
        "two grants shared a token"
    );
}

/// All `limit` permits can be held at once by different clients; the next
/// one would block until a permit is released, and then gets in with a
/// higher token.
pub async fn all_permits_can_be_held_at_once(target: &dyn Target) {
    if !semaphores_apply(target, "all_permits_can_be_held_at_once").await {
        return;
    }
    let name = "conformance/semaphore/full";
    let mut held = Vec::new();
    for _ in 0..LIMIT {
        let client = target.client().await;
        held.push(
            try_grant(&*client, name, permit(LIMIT))
                .await
                .expect("a free permit"),
        );
    }
    let late = target.client().await;
    let err = try_grant(&*late, name, permit(LIMIT)).await;
    fails_with(ErrorKind::WouldBlock, "a permit beyond the limit", err);
    let newest = held.iter().map(|g| g.token()).max().expect("held");
    held.pop().expect("held").release().await.expect("release");
    let next = within(
        SLACK,
        "the freed permit",
        late.shared_with(name, permit(LIMIT), &waiting()),
    )
    .await
    .expect("the freed permit");
    token_after(newest, next.token());
    for guard in held.into_iter().chain([next]) {
        guard.release().await.expect("release");
    }
}

/// A permit asked for with another limit than the one in use fails with
/// `InvalidConfig` naming both limits, and takes nothing.
pub async fn semaphore_limits_must_agree(target: &dyn Target) {
    if !semaphores_apply(target, "semaphore_limits_must_agree").await {
        return;
    }
    let name = "conformance/semaphore/limits";
    let (a, b) = super::two_clients(target).await;
    let held = try_grant(&*a, name, permit(2)).await.expect("a permit");
    let err = within(
        SLACK,
        "a disagreeing limit",
        b.shared_with(name, permit(5), &waiting()),
    )
    .await;
    let err = fails_with(ErrorKind::InvalidConfig, "a disagreeing limit", err);
    let message = err.to_string();
    assert!(
        message.contains('2') && message.contains('5'),
        "names both limits: {message}"
    );
    let second = try_grant(&*b, name, permit(2))
        .await
        .expect("the second of 2 permits is free");
    for guard in [held, second] {
        guard.release().await.expect("release");
    }
}

/// A permit holder that crashes frees its permit within its TTL: a client
/// waiting on the full semaphore gets in.
pub async fn a_crashed_permit_holder_frees_its_permit(target: &dyn Target) {
    if !semaphores_apply(target, "a_crashed_permit_holder_frees_its_permit").await {
        return;
    }
    let name = "conformance/semaphore/crash";
    let (a, b) = super::two_clients(target).await;
    let held = try_grant(&*a, name, permit(1)).await.expect("the permit");
    let token = held.token();
    target.crash(held).await;
    let bound = target.ttl() * 3 + SLACK;
    let next = within(
        bound,
        "a permit after its holder crashed",
        b.shared_with(name, permit(1), &waiting()),
    )
    .await
    .expect("the crashed holder's permit");
    token_after(token, next.token());
    next.release().await.expect("release");
}

/// Readers overlap: three clients hold the read side at once.
pub async fn readers_overlap(target: &dyn Target) {
    if !rwlocks_apply(target, "readers_overlap").await {
        return;
    }
    let name = "conformance/rwlock/readers";
    let mut readers = Vec::new();
    for _ in 0..3 {
        let client = target.client().await;
        readers.push(
            try_grant(&*client, name, Access::Read)
                .await
                .expect("a reader beside readers"),
        );
    }
    let writer = target.client().await;
    let err = try_grant(&*writer, name, Access::Write).await;
    fails_with(ErrorKind::WouldBlock, "a writer beside readers", err);
    for guard in readers {
        guard.release().await.expect("release");
    }
}

/// Readers and writers contend: a writer is never inside with anyone, the
/// writers' non-atomic increments all count, and readers do get in together.
pub async fn a_writer_never_overlaps_a_reader_or_a_writer(target: &dyn Target) {
    let case = "a_writer_never_overlaps_a_reader_or_a_writer";
    if !rwlocks_apply(target, case).await {
        return;
    }
    let name = "conformance/rwlock/contention";
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..CONTENDERS {
        let client = target.client().await;
        let (readers, writers, counter) = (readers.clone(), writers.clone(), counter.clone());
        let access = if task % 2 == 0 {
            Access::Write
        } else {
            Access::Read
        };
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = grant(&*client, name, access).await;
                if access == Access::Write {
                    let others =
                        writers.fetch_add(1, Ordering::SeqCst) + readers.load(Ordering::SeqCst);
                    assert_eq!(others, 0, "a writer inside with {others} others");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    readers.fetch_add(1, Ordering::SeqCst);
                    let w = writers.load(Ordering::SeqCst);
                    assert_eq!(w, 0, "a reader inside with a writer");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
                guard.release().await.expect("release");
            }
        }));
    }
    super::join_within(Duration::from_secs(120), "read-write contention", tasks).await;
    let writes = CONTENDERS.div_ceil(2) * ROUNDS;
    assert_eq!(
        counter.load(Ordering::SeqCst),
        writes as u64,
        "a write was lost"
    );
}

/// A writer that queues behind a reader goes before readers that arrive
/// after it: a new reader is refused while the writer waits, and a reader
/// that waits is granted only after the writer, with a higher token.
pub async fn a_queued_writer_goes_before_later_readers(target: &dyn Target) {
    if !rwlocks_apply(target, "a_queued_writer_goes_before_later_readers").await {
        return;
    }
    let name = "conformance/rwlock/writer-first";
    let (first, writer, late) = (
        target.client().await,
        target.client().await,
        target.client().await,
    );
    let reading = try_grant(&*first, name, Access::Read)
        .await
        .expect("the first reader");
    let writing = tokio::spawn(async move {
        let guard = grant(&*writer, name, Access::Write).await;
        (writer, guard)
    });
    // The writer is queued once a new reader is refused; until then a
    // reader that got in is let go again.
    within(SLACK * 3, "the writer to queue", async {
        loop {
            match try_grant(&*late, name, Access::Read).await {
                Ok(reader) => reader.release().await.expect("release"),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => panic!("a reader's try: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let late_reader = {
        let late = late.clone();
        tokio::spawn(async move { grant(&*late, name, Access::Read).await })
    };
    let first_token = reading.token();
    reading.release().await.expect("release");
    let (_writer, writing) = joined(SLACK * 2, "the queued writer", writing).await;
    token_after(first_token, writing.token());
    assert!(
        !late_reader.is_finished(),
        "a later reader got in beside the writer"
    );
    let write_token = writing.token();
    writing.release().await.expect("release");
    let reader = joined(SLACK * 2, "the later reader", late_reader).await;
    token_after(write_token, reader.token());
    reader.release().await.expect("release");
}

/// Tokens strictly increase across every kind of grant of one read-write
/// lock, in grant order: write, read, read, write, read.
pub async fn tokens_increase_across_every_kind_of_grant(target: &dyn Target) {
    if !rwlocks_apply(target, "tokens_increase_across_every_kind_of_grant").await {
        return;
    }
    let name = "conformance/rwlock/tokens";
    let client = target.client().await;
    let mut last = None;
    for step in [
        vec![Access::Write],
        vec![Access::Read, Access::Read],
        vec![Access::Write],
        vec![Access::Read],
    ] {
        let mut guards = Vec::new();
        for access in step {
            let guard = try_grant(&*client, name, access).await.expect("free");
            if let Some(last) = last {
                token_after(last, guard.token());
            }
            last = Some(guard.token());
            guards.push(guard);
        }
        for guard in guards {
            guard.release().await.expect("release");
        }
    }
}

/// A waiting permit, reader or writer whose future is dropped gives up its
/// place: once the holder releases, the next contender gets in well within
/// the TTL.
pub async fn cancelled_shared_acquires_give_up_their_place(target: &dyn Target) {
    let caps = super::capabilities_of(target).await;
    let case = "cancelled_shared_acquires_give_up_their_place";
    for (name, holding, cancelled, next) in [
        (
            "conformance/semaphore/cancel",
            permit(1),
            permit(1),
            permit(1),
        ),
        (
            "conformance/rwlock/cancel-writer",
            Access::Read,
            Access::Write,
            Access::Read,
        ),
        (
            "conformance/rwlock/cancel-reader",
            Access::Write,
            Access::Read,
            Access::Write,
        ),
    ] {
        if !applies(&caps, case, holding) {
            continue;
        }
        let (a, b, c) = (
            target.client().await,
            target.client().await,
            target.client().await,
        );
        let held = try_grant(&*a, name, holding).await.expect("free");
        let gone =
            tokio::time::timeout(Duration::from_millis(300), grant(&*b, name, cancelled)).await;
        assert!(
            gone.is_err(),
            "{}: must still be waiting when cancelled",
            cancelled.as_str()
        );
        held.release().await.expect("release");
        let after = within(
            target.ttl() + SLACK,
            "the next contender after a cancelled waiter",
            c.shared_with(name, next, &waiting()),
        )
        .await
        .expect("the next contender");
        after.release().await.expect("release");
    }
}
