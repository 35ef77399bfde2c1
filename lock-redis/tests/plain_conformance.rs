//! The whole distlock-testkit conformance suite against a real Redis with
//! plain-layout (`layout=plain`) clients, one server per test. What the
//! layout lacks (FIFO, elections, semaphores, read-write locks, listing)
//! is declared in its capabilities, and those cases skip themselves.

mod support;

use support::target::RedisTarget;

distlock_testkit::conformance_tests!(RedisTarget::plain().await);
