//! What backend authors need, kept apart from what lock users need.
//!
//! A backend supplies its round trips as a [`Lease`] and builds its guards
//! with [`LockGuard::leased`](crate::LockGuard::leased), passing the one
//! [`Renewer`] it keeps with each [`Grant`] (or, when its lease
//! is a session, [`LockGuard::new`](crate::LockGuard::new) with a
//! [`Validity`] it keeps itself). The rest of this module is the machinery
//! behind those: the renewal schedule, the lease clock, background work that a
//! program can wait for, the lost-signal sender, the [`LeaderFilter`]
//! every observe stream yields through, and the parsing helpers every
//! backend's URL form shares.

pub use crate::background::{
    finish as finish_in_background, in_flight, spawn as spawn_background,
    spawn_on as spawn_background_on,
};
pub use crate::client_config::CLIENT_SETTINGS;
pub use crate::clock::{BootClock, LeaseClock, ManualClock, SentAt, TokioClock, boot_clock};
pub use crate::duration::{
    format_duration, human_duration, lease_millis, parse_duration, serde_humane,
};
pub use crate::guard::HeldLock;
pub use crate::leader_filter::LeaderFilter;
pub use crate::lease::{Grant, Lease};
pub use crate::lost::LossNotifier;
pub use crate::options::ttl_for;
pub use crate::renewal::{Validity, drift_allowance};
pub use crate::renewer::{RenewFn, RenewalTask, Renewer};
pub use crate::settings::Settings;
pub use crate::site::Site;
pub use crate::telemetry::{observe_acquire, observe_renewal};
pub use crate::url_parts::{
    UrlParts, join_host_port, percent_decode, redact_url, split_host_port, with_default_port,
};
pub use crate::{apply_client_settings, client_config_builders};
