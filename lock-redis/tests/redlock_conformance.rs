//! The whole distlock-testkit conformance suite against Redlock on three real,
//! independent Redis servers.

mod support;

use support::target::RedisTarget;

distlock_testkit::conformance_tests!(RedisTarget::redlock().await);
