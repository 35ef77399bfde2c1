//! The conformance suite: one `pub async fn` per property of the contract.
//!
//! A backend crate implements [`Target`] for its service under test and runs
//! the whole suite with one line:
//!
//! ```ignore
//! distlock_testkit::conformance_tests!(my_backend::test_target().await);
//! ```
//!
//! The macro expands to one `#[tokio::test]` per property, named after it, so
//! a failure names the property that broke. Cases that depend on an optional
//! capability (FIFO, election) check [`Capabilities`] first and say so when
//! they do not apply.

mod admin;
mod election;
mod fencing;
mod lease;
mod locking;
mod multi;
mod scope;
mod shared;
mod takeover;
mod telemetry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireOptions, Capabilities, DynElectionBackend, DynLockBackend, LockBackendExt, LockGuard,
};
use tokio::task::JoinHandle;

pub use admin::{
    force_release_evicts_the_holder_and_the_next_token_is_higher,
    holder_is_described_by_host_and_pid_by_default, inspect_shows_the_holder_and_its_waiters,
    list_finds_every_held_name_under_a_prefix, releasing_a_broken_guard_is_lease_lost,
};
pub use election::{
    election_has_one_leader_at_a_time, election_observe_outlives_an_empty_election,
    election_observe_sees_leaders_in_order, election_reproclaiming_the_same_value_yields_nothing,
    election_resign_hands_over,
};
pub use fencing::{
    tokens_increase_across_successive_holders, tokens_increase_after_expiry_takeover,
};
pub use lease::{
    expired_holder_is_taken_over_after_ttl, lost_signal_fires_when_lease_is_killed,
    release_after_loss_is_harmless, renewal_keeps_lock_across_five_ttls,
    stale_release_never_deletes_new_holder,
};
pub use locking::{
    cancelled_lock_does_not_block_next_contender, different_names_do_not_block,
    failed_attempts_leave_nothing_behind, fifo_order_where_declared,
    invalid_input_is_rejected_before_io, mutual_exclusion_under_contention,
    try_lock_on_held_lock_would_block, wait_timeout_returns_timeout_within_bound,
};
pub use multi::{
    a_cancelled_multi_lock_frees_its_members, a_lost_member_fires_the_multi_lock_lost_signal,
    multi_lock_is_all_or_nothing, multi_locks_in_opposite_orders_do_not_deadlock,
};
pub use scope::{
    cancelled_waiter_in_an_exiting_program_gives_up_its_place,
    release_completes_before_a_runtime_shuts_down, with_lock_releases_before_returning,
};
pub use shared::{
    a_crashed_permit_holder_frees_its_permit, a_queued_writer_goes_before_later_readers,
    a_writer_never_overlaps_a_reader_or_a_writer, all_permits_can_be_held_at_once,
    cancelled_shared_acquires_give_up_their_place, readers_overlap, semaphore_limits_must_agree,
    semaphore_never_exceeds_its_limit_under_contention, tokens_increase_across_every_kind_of_grant,
};
pub use takeover::{
    a_broken_holder_never_renews_its_successors_lock,
    an_expired_holder_never_renews_its_successors_lock,
};
pub use telemetry::metrics_and_spans_are_the_same_on_every_backend;

/// Extra time allowed on top of a protocol bound before a test calls it a hang.
pub const SLACK: Duration = Duration::from_secs(3);

/// The service under test, as the conformance suite sees it.
#[async_trait]
pub trait Target: Send + Sync + 'static {
    /// A new, independent client: its own connections and session, as a
    /// separate process would have. Every client of the suite's backends
    /// also elects, so this is [`election_client`](Self::election_client);
    /// a backend without election overrides it.
    async fn client(&self) -> Arc<DynLockBackend> {
        self.election_client().await
    }

    /// A new, independent election client, as [`client`](Self::client).
    ///
    /// The election cases call it only where [`Capabilities::election`]
    /// declares election, and skip the backend otherwise.
    async fn election_client(&self) -> Arc<DynElectionBackend>;

    /// The lease TTL the tests use: short, but at least the backend's minimum.
    fn ttl(&self) -> Duration;

    /// Ends the lease behind `guard` from outside, as the server would on
    /// expiry (revoke the lease, delete the key, expire the session, ...).
    async fn kill_lease(&self, guard: &LockGuard);

    /// Makes the holder stop renewing as if its process had crashed.
    ///
    /// The default abandons the guard: renewal stops and the lock expires
    /// after its TTL. Backends whose leases belong to a shared session
    /// override it.
    async fn crash(&self, guard: LockGuard) {
        guard.abandon();
    }
}

/// The capabilities of a fresh client of `target`.
pub async fn capabilities_of(target: &dyn Target) -> Capabilities {
    target.client().await.capabilities()
}

/// Expands to one `#[tokio::test]` per conformance property, each calling the
/// property's function with the target built by the given expression.
///
/// The expression is evaluated inside each async test, so it may `.await`
/// (for example, to start a real server per test).
#[macro_export]
macro_rules! conformance_tests {
    ($target:expr) => {
        $crate::conformance_tests!(@cases $target;
            mutual_exclusion_under_contention,
            try_lock_on_held_lock_would_block,
            wait_timeout_returns_timeout_within_bound,
            failed_attempts_leave_nothing_behind,
            different_names_do_not_block,
            invalid_input_is_rejected_before_io,
            cancelled_lock_does_not_block_next_contender,
            fifo_order_where_declared,
            tokens_increase_across_successive_holders,
            tokens_increase_after_expiry_takeover,
            expired_holder_is_taken_over_after_ttl,
            renewal_keeps_lock_across_five_ttls,
            lost_signal_fires_when_lease_is_killed,
            stale_release_never_deletes_new_holder,
            release_after_loss_is_harmless,
            an_expired_holder_never_renews_its_successors_lock,
            a_broken_holder_never_renews_its_successors_lock,
            with_lock_releases_before_returning,
            release_completes_before_a_runtime_shuts_down,
            cancelled_waiter_in_an_exiting_program_gives_up_its_place,
            election_has_one_leader_at_a_time,
            election_observe_sees_leaders_in_order,
            election_observe_outlives_an_empty_election,
            election_reproclaiming_the_same_value_yields_nothing,
            election_resign_hands_over,
            inspect_shows_the_holder_and_its_waiters,
            holder_is_described_by_host_and_pid_by_default,
            list_finds_every_held_name_under_a_prefix,
            force_release_evicts_the_holder_and_the_next_token_is_higher,
            releasing_a_broken_guard_is_lease_lost,
            metrics_and_spans_are_the_same_on_every_backend,
            multi_lock_is_all_or_nothing,
            multi_locks_in_opposite_orders_do_not_deadlock,
            a_lost_member_fires_the_multi_lock_lost_signal,
            a_cancelled_multi_lock_frees_its_members,
            semaphore_never_exceeds_its_limit_under_contention,
            all_permits_can_be_held_at_once,
            semaphore_limits_must_agree,
            a_crashed_permit_holder_frees_its_permit,
            readers_overlap,
            a_writer_never_overlaps_a_reader_or_a_writer,
            a_queued_writer_goes_before_later_readers,
            tokens_increase_across_every_kind_of_grant,
            cancelled_shared_acquires_give_up_their_place
        );
    };
    (@cases $target:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let target = $target;
                $crate::conformance::$case(&target).await;
            }
        )*
    };
}

pub(crate) use crate::assert::within;

/// Two independent clients of `target`, as two processes would have.
pub(crate) async fn two_clients(target: &dyn Target) -> (Arc<DynLockBackend>, Arc<DynLockBackend>) {
    (target.client().await, target.client().await)
}

/// Two independent clients of `target`, the first holding `name`:
/// `(first, its guard, second)`, the second to contend with the guard.
pub(crate) async fn one_holds(
    target: &dyn Target,
    name: &str,
) -> (Arc<DynLockBackend>, LockGuard, Arc<DynLockBackend>) {
    let (a, b) = two_clients(target).await;
    let held = a.lock(name).await.expect("lock");
    (a, held, b)
}

/// Waits for every task, all within `bound`; a task that panicked fails
/// the case.
pub(crate) async fn join_within(bound: Duration, what: &str, tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        crate::assert::joined(bound, what, task).await;
    }
}

/// Crashes `held`'s holder and waits for `other` to take the lock over
/// once its TTL has run out (within three TTLs, not never).
pub(crate) async fn take_over_after_crash(
    target: &dyn Target,
    held: LockGuard,
    other: &DynLockBackend,
) -> LockGuard {
    let name = held.name().clone();
    target.crash(held).await;
    let bound = target.ttl() * 3 + SLACK;
    within(bound, "take over after the holder's TTL", async {
        other.acquire(&name, &AcquireOptions::new()).await
    })
    .await
    .expect("lock after expiry")
}
