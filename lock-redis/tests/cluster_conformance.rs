//! The whole distlock-testkit conformance suite against a real Redis Cluster of
//! three masters, a fresh cluster per test, each client with its own
//! connections.

mod support;

use support::cluster::ClusterTarget;

distlock_testkit::conformance_tests!(ClusterTarget::start().await);
