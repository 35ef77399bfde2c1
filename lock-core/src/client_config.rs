//! [`ClientConfig`]: what every networked backend's config shares, its
//! client settings, with one set of builders and one way of applying
//! [`Settings`].
//!
//! The configs differ in what they add (TLS, layouts, Redlock's servers),
//! so each keeps its own fields and lends them out as [`ClientFields`];
//! the builders and [`ClientConfig::apply_client_settings`] are written
//! once, here.

use std::time::Duration;

use crate::settings::Settings;

/// The client settings of a backend's config, borrowed for writing.
#[derive(Debug)]
pub struct ClientFields<'a> {
    /// Where the backend's keys or nodes live.
    pub prefix: &'a mut String,
    /// The bound on establishing a connection.
    pub connect_timeout: &'a mut Duration,
    /// The bound on each request.
    pub request_timeout: &'a mut Duration,
    /// The user name to authenticate as.
    pub username: &'a mut Option<String>,
    /// The password.
    pub password: &'a mut Option<String>,
    /// The holder description stored with every grant.
    pub holder: &'a mut Option<String>,
}

/// A networked backend's config: the builders of its client settings, and
/// applying the client settings of [`Settings`] over them.
///
/// Bring it into scope (`use distlock_core::ClientConfig`, or the backend
/// crate's re-export) to call the builders.
pub trait ClientConfig: Sized {
    /// The config's client settings, to write.
    fn client_fields(&mut self) -> ClientFields<'_>;

    /// Sets where this backend's keys or nodes live.
    fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        *self.client_fields().prefix = prefix.into();
        self
    }

    /// Sets the bound on establishing a connection.
    fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        *self.client_fields().connect_timeout = timeout;
        self
    }

    /// Sets the bound on each request, its retries included.
    fn with_request_timeout(mut self, timeout: Duration) -> Self {
        *self.client_fields().request_timeout = timeout;
        self
    }

    /// Sets the user name and password to authenticate with.
    fn with_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        let fields = self.client_fields();
        *fields.username = Some(username.into());
        *fields.password = Some(password.into());
        self
    }

    /// Sets the holder description stored with every grant, for operators;
    /// an acquire's own label wins. The default is `host:pid`.
    fn with_holder(mut self, holder: impl Into<String>) -> Self {
        *self.client_fields().holder = Some(holder.into());
        self
    }

    /// Copies the client settings that `settings` sets over this config's:
    /// all but `ttl`, which each backend maps onto its own lease, and the
    /// backend's own [`options`](Settings::options).
    fn apply_client_settings(&mut self, settings: &Settings) {
        let fields = self.client_fields();
        if let Some(timeout) = settings.connect_timeout {
            *fields.connect_timeout = timeout;
        }
        if let Some(timeout) = settings.request_timeout {
            *fields.request_timeout = timeout;
        }
        let text = [
            (&settings.username, fields.username),
            (&settings.password, fields.password),
            (&settings.holder, fields.holder),
        ];
        for (given, field) in text {
            if given.is_some() {
                field.clone_from(given);
            }
        }
        if let Some(prefix) = &settings.prefix {
            fields.prefix.clone_from(prefix);
        }
    }
}
