//! The whole distlock-testkit conformance suite against a real Redis with
//! non-fair (`fair=false`) clients, one server per test, each client with
//! its own connections. Properties that need FIFO skip themselves: these
//! clients declare none.

mod support;

use support::target::RedisTarget;

distlock_testkit::conformance_tests!(RedisTarget::nonfair().await);
