//! The whole distlock-testkit conformance suite against a real Redis, one
//! server per test, each client with its own connections.

mod support;

use support::target::RedisTarget;

distlock_testkit::conformance_tests!(RedisTarget::single().await);
