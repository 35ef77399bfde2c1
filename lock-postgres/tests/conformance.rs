//! The whole distlock-testkit conformance suite against a real PostgreSQL, one
//! server per test, each client with its own connections.

mod support;

use support::PostgresTarget;

distlock_testkit::conformance_tests!(PostgresTarget::start().await);
