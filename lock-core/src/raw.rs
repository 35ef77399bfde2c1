//! What backend authors need, kept apart from what lock users need.
//!
//! A backend supplies its round trips as a [`Lease`] and builds its guards
//! with [`leased_guard`], passing the one [`Renewer`] it keeps with each
//! [`Grant`] (or, when its lease is a session, [`session_guard`] with a
//! [`Validity`] it keeps itself). Lock users never build guards, so these
//! constructors live here and not on [`LockGuard`]. The rest of this module is the machinery
//! behind those: the renewal schedule, the lease clock, background work that a
//! program can wait for, the lost-signal sender, the [`LeaderFilter`]
//! every observe stream yields through and the loop around it
//! ([`observe_leaders`], fed by a backend's [`LeaderSource`]), and the parsing helpers every
//! backend's URL form shares.

pub use crate::access::{SharedSpace, blockers, check_limit_agrees, parse_permits};
pub use crate::admin::holder_description;
pub use crate::background::{
    finish as finish_in_background, in_flight, spawn as spawn_background,
    spawn_on as spawn_background_on,
};
pub use crate::client_config::ClientFields;
pub use crate::clock::{BootClock, LeaseClock, ManualClock, SentAt, TokioClock, boot_clock};
pub use crate::duration::{
    format_duration, human_duration, lease_millis, parse_duration, serde_humane,
};
pub use crate::flag::parse_flag;
pub use crate::guard::{HeldLock, session_guard};
pub use crate::leader_filter::LeaderFilter;
pub use crate::leader_observer::{
    LeaderSource, NotifyHint, OBSERVE_BACKOFF_CAP, ObserveBackoff, observe_leaders,
    observer_carries_on_after,
};
pub use crate::lease::{Grant, Lease};
pub use crate::lost::LossNotifier;
pub use crate::options::ttl_for;
pub use crate::renewer::{RenewFn, RenewalTask, Renewer};
pub use crate::settings::{
    SETTINGS, SettingScope, SettingSpec, Settings, setting_names, setting_of_url_option,
};
pub use crate::site::Site;
pub use crate::space::Space;
pub use crate::telemetry::record::{count_renewal_failing, observe_acquire, observe_renewal};
pub use crate::tls_files::TlsFiles;
pub use crate::url_parts::{
    UrlParts, join_host_port, percent_decode, redact_url, split_host_port, with_default_port,
};
pub use crate::validity::{Validity, drift_allowance};

use crate::{LockGuard, Result};

/// The guard of `grant`, kept by distlock-core: validity, renewal of `lease`
/// every TTL/3 on the grant's [`Renewer`], and the lost signal.
///
/// Fails with `LeaseLost` if the grant's validity has already run out (the
/// acquisition took longer than the TTL); the lease is then released in the
/// background, and no guard is ever handed out.
pub fn leased_guard(grant: Grant, lease: impl Lease) -> Result<LockGuard> {
    LockGuard::leased(grant, lease)
}
