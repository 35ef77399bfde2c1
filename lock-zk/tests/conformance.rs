//! The distlock-testkit conformance suite (locks and election) against a real
//! standalone ZooKeeper, one server per test.

mod support;

distlock_testkit::conformance_tests!(support::ZkTarget::start().await);
