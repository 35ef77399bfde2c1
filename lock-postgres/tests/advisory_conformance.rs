//! The conformance suite against the advisory layout: what it offers must
//! hold, and what it lacks must be declared (the suite skips it).

mod support;

use support::AdvisoryTarget;

distlock_testkit::conformance_tests!(AdvisoryTarget::start().await);
