//! Known-good and known-bad histories for every model.

use std::time::{Duration, Instant};

use super::*;

const MS: u64 = 1_000_000;

fn at(process: u64, op: Op, invoke_ms: u64, complete_ms: u64, outcome: Outcome) -> Operation {
    Operation {
        process,
        op,
        invoke: invoke_ms * MS,
        complete: complete_ms * MS,
        outcome,
    }
}

fn acquire(name: &str, mode: Mode) -> Op {
    Op::Acquire {
        name: name.into(),
        mode,
    }
}

fn lock(name: &str) -> Op {
    acquire(name, Mode::Exclusive)
}

fn release(name: &str) -> Op {
    Op::Release { name: name.into() }
}

fn lost(name: &str) -> Op {
    Op::Lost { name: name.into() }
}

fn write(name: &str, token: u64) -> Op {
    Op::Write {
        name: name.into(),
        token,
    }
}

use Outcome::{Fail, Info, Ok as Done};

fn verdict(history: &[Operation]) -> Verdict {
    check(history, &CheckOptions::default()).expect("a well-formed history")
}

fn assert_good(history: &[Operation]) {
    let v = verdict(history);
    assert_eq!(v, Verdict::Linearizable, "{v}");
}

/// Asserts the history fails on `name` and returns the explanation.
fn assert_bad(history: &[Operation], name: &str) -> Explanation {
    match verdict(history) {
        Verdict::NotLinearizable {
            name: bad,
            explanation,
        } => {
            assert_eq!(bad, name, "{explanation}");
            explanation
        }
        other => panic!("expected lock {name} not linearizable, got {other}"),
    }
}

#[test]
fn sequential_acquire_release_is_linearizable() {
    assert_good(&[
        at(1, lock("a"), 0, 1, Done),
        at(1, write("a", 1), 2, 3, Done),
        at(1, release("a"), 4, 5, Done),
        at(2, lock("a"), 6, 7, Done),
        at(2, write("a", 2), 8, 9, Done),
        at(2, release("a"), 10, 11, Done),
    ]);
}

#[test]
fn an_empty_history_is_linearizable() {
    assert_good(&[]);
}

#[test]
fn two_overlapping_mutex_grants_are_not_linearizable() {
    let explanation = assert_bad(
        &[
            at(1, lock("a"), 0, 10, Done),
            at(2, lock("a"), 5, 12, Done),
            at(1, release("a"), 20, 21, Done),
            at(2, release("a"), 22, 23, Done),
        ],
        "a",
    );
    assert_eq!(explanation.model, Model::Mutex);
    assert_eq!(explanation.prefix_end, 12 * MS, "{explanation}");
    assert_eq!(explanation.culprit.process, 2);
    assert!(explanation.window_alone_fails, "{explanation}");
    let processes: Vec<u64> = explanation.window.iter().map(|op| op.process).collect();
    assert_eq!(processes, [1, 2], "{explanation}");
}

#[test]
fn concurrent_grants_that_can_be_ordered_are_linearizable() {
    // Process 2's grant overlaps process 1's release, which may come first.
    assert_good(&[
        at(1, lock("a"), 0, 1, Done),
        at(2, lock("a"), 2, 10, Done),
        at(1, release("a"), 3, 8, Done),
        at(2, release("a"), 11, 12, Done),
    ]);
}

#[test]
fn a_failed_attempt_takes_no_effect() {
    assert_good(&[
        at(1, lock("a"), 0, 1, Done),
        at(2, lock("a"), 2, 3, Fail),
        at(1, release("a"), 4, 5, Done),
        at(2, lock("a"), 6, 7, Done),
    ]);
}

#[test]
fn an_unknown_grant_that_took_effect_holds_until_its_release() {
    // Process 1 timed out acquiring, but its write proves it held; process
    // 2 is only granted after process 1's release.
    assert_good(&[
        at(1, lock("a"), 0, 5, Info),
        at(2, lock("a"), 3, 6, Fail),
        at(1, write("a", 1), 7, 8, Done),
        at(1, release("a"), 10, 12, Done),
        at(2, lock("a"), 15, 20, Done),
        at(2, write("a", 2), 21, 22, Done),
    ]);
}

#[test]
fn an_unknown_grant_that_never_took_effect_blocks_nobody() {
    assert_good(&[
        at(1, lock("a"), 0, 5, Info),
        at(2, lock("a"), 10, 12, Done),
        at(2, release("a"), 13, 14, Done),
        at(3, lock("a"), 15, 16, Done),
        at(3, release("a"), 17, 18, Done),
    ]);
}

#[test]
fn an_unknown_grant_proven_by_a_write_and_never_released_blocks_others() {
    assert_bad(
        &[
            at(1, lock("a"), 0, 5, Info),
            at(1, write("a", 1), 6, 7, Done),
            at(2, lock("a"), 10, 12, Done),
        ],
        "a",
    );
}

#[test]
fn an_abandoned_request_granted_late_does_not_cover_a_later_write() {
    // Process 1 gave up on one request, was granted by its next, lost that
    // hold, then wrote: a late grant of the first request is not a hold it
    // knows of.
    assert_bad(
        &[
            at(1, lock("a"), 0, 1, Info),
            at(1, lock("a"), 2, 3, Done),
            at(1, lost("a"), 5, 5, Done),
            at(1, write("a", 1), 6, 7, Done),
        ],
        "a",
    );
}

#[test]
fn an_unknown_release_may_have_freed_the_lock() {
    assert_good(&[
        at(1, lock("a"), 0, 1, Done),
        at(1, release("a"), 2, 3, Info),
        at(2, lock("a"), 10, 11, Done),
    ]);
}

#[test]
fn a_semaphore_of_two_admits_two_holders() {
    let permit = Mode::Permit { limit: 2 };
    assert_good(&[
        at(1, acquire("s", permit), 0, 2, Done),
        at(2, acquire("s", permit), 1, 3, Done),
        at(3, acquire("s", permit), 2, 4, Fail),
        at(1, write("s", 1), 5, 6, Done),
        at(2, write("s", 2), 5, 6, Done),
        at(1, release("s"), 7, 8, Done),
        at(3, acquire("s", permit), 9, 10, Done),
    ]);
}

#[test]
fn a_semaphore_of_two_with_three_holders_is_not_linearizable() {
    let permit = Mode::Permit { limit: 2 };
    let explanation = assert_bad(
        &[
            at(1, acquire("s", permit), 0, 2, Done),
            at(2, acquire("s", permit), 1, 3, Done),
            at(3, acquire("s", permit), 2, 4, Done),
            at(1, release("s"), 10, 11, Done),
        ],
        "s",
    );
    assert_eq!(explanation.model, Model::Semaphore { permits: 2 });
    assert_eq!(explanation.window.len(), 3, "{explanation}");
}

#[test]
fn a_read_write_lock_admits_two_readers() {
    assert_good(&[
        at(1, acquire("rw", Mode::Read), 0, 2, Done),
        at(2, acquire("rw", Mode::Read), 1, 3, Done),
        at(1, release("rw"), 4, 5, Done),
        at(2, release("rw"), 4, 6, Done),
        at(3, acquire("rw", Mode::Write), 7, 8, Done),
        at(3, write("rw", 3), 9, 10, Done),
    ]);
}

#[test]
fn a_reader_and_a_writer_overlapping_are_not_linearizable() {
    assert_bad(
        &[
            at(1, acquire("rw", Mode::Read), 0, 2, Done),
            at(2, acquire("rw", Mode::Write), 1, 3, Done),
            at(1, release("rw"), 4, 5, Done),
        ],
        "rw",
    );
}

#[test]
fn a_write_after_release_is_not_linearizable() {
    let explanation = assert_bad(
        &[
            at(1, lock("a"), 0, 1, Done),
            at(1, release("a"), 2, 3, Done),
            at(1, write("a", 1), 4, 5, Done),
        ],
        "a",
    );
    assert_eq!(explanation.culprit.op, write("a", 1));
    assert!(explanation.window_alone_fails, "{explanation}");
}

#[test]
fn a_write_after_the_lost_signal_is_not_linearizable() {
    assert_bad(
        &[
            at(1, lock("a"), 0, 1, Done),
            at(1, lost("a"), 5, 5, Done),
            at(1, write("a", 1), 6, 7, Done),
        ],
        "a",
    );
}

#[test]
fn a_takeover_before_the_lost_signal_is_linearizable() {
    // The lease ended at some moment before the signal reached process 1;
    // process 2 was granted in between.
    assert_good(&[
        at(1, lock("a"), 0, 1, Done),
        at(1, write("a", 1), 2, 3, Done),
        at(2, lock("a"), 10, 11, Done),
        at(2, write("a", 2), 12, 13, Done),
        at(1, lost("a"), 15, 15, Done),
        at(1, lock("a"), 16, 17, Fail),
    ]);
}

#[test]
fn a_write_by_a_taken_over_holder_before_its_signal_is_not_linearizable() {
    assert_bad(
        &[
            at(1, lock("a"), 0, 1, Done),
            at(2, lock("a"), 10, 11, Done),
            at(1, write("a", 1), 12, 13, Done),
            at(1, lost("a"), 15, 15, Done),
        ],
        "a",
    );
}

#[test]
fn fencing_tokens_going_back_are_caught_when_asked() {
    let history = [
        at(1, lock("a"), 0, 1, Done),
        at(1, write("a", 7), 2, 3, Done),
        at(1, release("a"), 4, 5, Done),
        at(2, lock("a"), 6, 7, Done),
        at(2, write("a", 6), 8, 9, Done),
    ];
    assert_good(&history);
    let fenced = CheckOptions {
        fencing: true,
        ..CheckOptions::default()
    };
    assert!(matches!(
        check(&history, &fenced),
        Ok(Verdict::NotLinearizable { .. })
    ));
}

#[test]
fn names_are_checked_apart() {
    // The same processes hold two different mutexes at once.
    assert_good(&[
        at(1, lock("a"), 0, 2, Done),
        at(2, lock("b"), 0, 2, Done),
        at(1, lock("b"), 3, 4, Fail),
        at(2, release("b"), 5, 6, Done),
        at(1, release("a"), 7, 8, Done),
    ]);
    assert_bad(
        &[
            at(1, lock("a"), 0, 2, Done),
            at(1, lock("b"), 0, 2, Done),
            at(2, lock("b"), 3, 4, Done),
        ],
        "b",
    );
}

#[test]
fn malformed_histories_are_typed_errors() {
    let options = CheckOptions::default();
    assert!(matches!(
        check(&[at(1, lock("a"), 5, 4, Done)], &options),
        Err(HistoryError::CompleteBeforeInvoke(_))
    ));
    let mixed = [
        at(1, lock("a"), 0, 1, Done),
        at(2, acquire("a", Mode::Read), 2, 3, Done),
    ];
    assert!(matches!(
        check(&mixed, &options),
        Err(HistoryError::MixedPrimitives { .. })
    ));
    let zero = [at(1, acquire("s", Mode::Permit { limit: 0 }), 0, 1, Done)];
    assert!(matches!(
        check(&zero, &options),
        Err(HistoryError::ZeroPermits(_))
    ));
}

#[test]
fn a_search_out_of_budget_is_unknown() {
    // Placing its calls takes more than ten steps.
    let history = simulate(Model::Mutex, 8, 50, 3);
    let options = CheckOptions {
        max_steps: 10,
        ..CheckOptions::default()
    };
    let v = check(&history, &options).expect("well formed");
    assert!(matches!(v, Verdict::Unknown { .. }), "{v}");
}

#[test]
fn operations_round_trip_through_json_lines() {
    let history = [
        at(1, lock("a"), 0, 1, Done),
        at(2, acquire("s", Mode::Permit { limit: 3 }), 0, 1, Info),
        at(3, acquire("rw", Mode::Read), 0, 1, Fail),
        at(1, write("a", 42), 2, 3, Done),
        at(1, lost("a"), 4, 5, Done),
        at(1, release("a"), 6, 7, Done),
    ];
    let lines: Vec<String> = history
        .iter()
        .map(|op| serde_json::to_string(op).expect("serializes"))
        .collect();
    assert!(!lines.iter().any(|line| line.contains('\n')));
    let back: Vec<Operation> = lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("parses"))
        .collect();
    assert_eq!(back, history);
    assert_eq!(
        lines[1],
        r#"{"process":2,"op":{"kind":"acquire","name":"s","mode":{"permit":{"limit":3}}},"invoke":0,"complete":1000000,"outcome":"info"}"#
    );
    let verdict = verdict(&history);
    let json = serde_json::to_string(&verdict).expect("serializes");
    assert_eq!(
        serde_json::from_str::<Verdict>(&json).expect("parses"),
        verdict
    );
}

#[test]
fn large_random_histories_check_well_under_a_second() {
    for (model, seed) in [
        (Model::Mutex, 1),
        (Model::Semaphore { permits: 3 }, 2),
        (Model::RwLock, 3),
    ] {
        let history = simulate(model, 8, 200, seed);
        assert_eq!(history.len(), 1600);
        let started = Instant::now();
        let v = verdict(&history);
        let took = started.elapsed();
        assert_eq!(v, Verdict::Linearizable, "{model}: {v}");
        assert!(took < Duration::from_secs(1), "{model}: {took:?}");
    }
}

#[test]
fn a_large_random_history_with_one_forged_grant_is_caught() {
    let mut history = simulate(Model::Mutex, 8, 200, 4);
    // A failed attempt made while another process held, turned into a grant.
    let forged = history
        .iter()
        .position(|op| matches!(op.op, Op::Acquire { .. }) && op.outcome == Fail)
        .expect("a contended history has failed attempts");
    history[forged].outcome = Done;
    let started = Instant::now();
    let v = verdict(&history);
    assert!(matches!(v, Verdict::NotLinearizable { .. }), "{v}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn random_histories_are_contended() {
    let history = simulate(Model::Mutex, 8, 200, 1);
    let count = |kind: fn(&Op) -> bool, outcome| {
        history
            .iter()
            .filter(|op| kind(&op.op) && op.outcome == outcome)
            .count()
    };
    let acquire = |op: &Op| matches!(op, Op::Acquire { .. });
    assert!(count(acquire, Done) > 50);
    assert!(count(acquire, Fail) > 100);
    assert!(count(|op| matches!(op, Op::Lost { .. }), Done) > 10);
    assert!(count(acquire, Info) > 10);
}

/// A linearizable history of `model` on the name `m`: `processes` clients
/// making `per_process` calls each, every call taking effect at a moment of
/// one sequential run and its interval jittered around that moment. Holders
/// write, release, or lose their hold (the signal arriving later); unknown
/// outcomes are mixed in.
fn simulate(model: Model, processes: u64, per_process: usize, seed: u64) -> Vec<Operation> {
    const US: u64 = 1_000;
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mode_of = |rng: &mut XorShift| match model {
        Model::Mutex => Mode::Exclusive,
        Model::Semaphore { permits } => Mode::Permit { limit: permits },
        Model::RwLock if rng.below(3) == 0 => Mode::Write,
        Model::RwLock => Mode::Read,
    };
    let mut state = model::State::default();
    let mut busy_until = vec![0u64; processes as usize];
    let mut made = vec![0usize; processes as usize];
    let mut holding = vec![false; processes as usize];
    let mut token = 0;
    let mut history = Vec::new();
    let mut now = 0u64;
    // The last call of a holder is a release, so that nobody stops holding.
    while made.iter().any(|&n| n < per_process) {
        now += 1 + rng.below(20 * US);
        // Holders are picked as often as everyone else together, so that
        // holds are short and grants many.
        let holders: Vec<usize> = (0..holding.len()).filter(|&p| holding[p]).collect();
        let p = if !holders.is_empty() && rng.below(2) == 0 {
            holders[rng.below(holders.len() as u64) as usize]
        } else {
            rng.below(processes) as usize
        };
        if made[p] >= per_process || busy_until[p] >= now {
            continue;
        }
        let invoke = busy_until[p] + 1 + rng.below(now - busy_until[p]);
        let complete = now + rng.below(40 * US);
        let process = p as u64;
        let last = made[p] + 1 == per_process;
        let (op, mut outcome) = if holding[p] {
            match if last { 9 } else { rng.below(10) } {
                0..=4 => {
                    token += 1;
                    (write("m", token), Done)
                }
                5 => (lost("m"), Done),
                _ => (release("m"), Done),
            }
        } else {
            (acquire("m", mode_of(&mut rng)), Done)
        };
        match model.step(&state, process, &op, false) {
            Some(next) => {
                holding[p] = matches!(op, Op::Acquire { .. } | Op::Write { .. });
                state = next;
            }
            None => outcome = Fail,
        }
        // Unknown outcomes: a call that took effect, or a failed one, whose
        // client gave up on the answer. An unknown release that took effect
        // is recorded as such; an unknown grant is then released.
        if rng.below(25) == 0 && !matches!(op, Op::Lost { .. } | Op::Write { .. }) {
            outcome = Info;
        }
        let (invoke, complete) = match op {
            // The signal arrives after the hold ended.
            Op::Lost { .. } => (complete, complete),
            _ => (invoke, complete),
        };
        history.push(Operation {
            process,
            op,
            invoke,
            complete,
            outcome,
        });
        busy_until[p] = complete;
        made[p] += 1;
    }
    history
}

/// A small deterministic generator, so a failing seed reproduces.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if n == 0 { 0 } else { self.0 % n }
    }
}
