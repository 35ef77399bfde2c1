//! The whole distlock-testkit conformance suite (lock and election) against a
//! real single-member etcd started per test.

mod support;

distlock_testkit::conformance_tests!(support::etcd_target().await);
