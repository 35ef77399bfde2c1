//! The conformance suite against the named layout: what it offers must
//! hold, and what it lacks must be declared (the suite skips it).

mod support;

use support::NamedTarget;

distlock_testkit::conformance_tests!(NamedTarget::start().await);
