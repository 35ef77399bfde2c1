//! The whole lock-testkit conformance suite (lock and election) against a
//! real single-member etcd started per test.

mod common;

lock_testkit::conformance_tests!(common::etcd_target().await);
