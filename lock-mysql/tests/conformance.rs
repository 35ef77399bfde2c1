//! The whole distlock-testkit conformance suite against a real MariaDB,
//! one server per test, each client with its own connections.

mod support;

use support::MysqlTarget;

distlock_testkit::conformance_tests!(MysqlTarget::start().await);
