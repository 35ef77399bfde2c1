//! What every networked backend's config shares: the builders for its
//! client settings, and applying those [`Settings`](crate::raw::Settings).
//!
//! The configs differ in what they add (TLS, layouts, Redlock's servers),
//! so the shared part is a macro over fields of the same names rather
//! than a struct they would all have to nest.

/// The settings names every networked backend honours, besides its own.
pub const CLIENT_SETTINGS: [&str; 7] = [
    "ttl",
    "connect_timeout",
    "request_timeout",
    "username",
    "password",
    "prefix",
    "holder",
];

/// Expands, inside a config's `impl` block, to the builders
/// `with_prefix`, `with_connect_timeout`, `with_request_timeout`,
/// `with_credentials` and `with_holder`. The config has fields named `prefix: String`, `connect_timeout`,
/// `request_timeout`, `username`, `password` and `holder`, either directly
/// (`client_config_builders!()`) or in one of its fields
/// (`client_config_builders!(common)`).
#[doc(hidden)]
#[macro_export]
macro_rules! client_config_builders {
    ($($via:ident)?) => {
        /// Sets where this backend's keys or nodes live.
        pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
            self$(.$via)?.prefix = prefix.into();
            self
        }

        /// Sets the bound on establishing a connection.
        pub fn with_connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self$(.$via)?.connect_timeout = timeout;
            self
        }

        /// Sets the bound on each request, its retries included.
        pub fn with_request_timeout(mut self, timeout: std::time::Duration) -> Self {
            self$(.$via)?.request_timeout = timeout;
            self
        }

        /// Sets the user name and password to authenticate with.
        pub fn with_credentials(
            mut self,
            username: impl Into<String>,
            password: impl Into<String>,
        ) -> Self {
            self$(.$via)?.username = Some(username.into());
            self$(.$via)?.password = Some(password.into());
            self
        }

        /// Sets the holder description stored with every grant, for
        /// operators; an acquire's own label wins. The default is `host:pid`.
        pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
            self$(.$via)?.holder = Some(holder.into());
            self
        }
    };
}

/// `apply_client_settings!(config, settings)` copies onto `config` (a
/// `&mut` to a config with the fields [`client_config_builders!`] names)
/// the client settings `settings` sets: all of [`CLIENT_SETTINGS`] but
/// `ttl`, which each backend maps onto its own lease.
#[doc(hidden)]
#[macro_export]
macro_rules! apply_client_settings {
    ($config:expr, $settings:expr) => {{
        let fields = $config;
        let settings: $crate::raw::Settings = $settings.clone();
        fields.connect_timeout = settings.connect_timeout.unwrap_or(fields.connect_timeout);
        fields.request_timeout = settings.request_timeout.unwrap_or(fields.request_timeout);
        fields.prefix = settings
            .prefix
            .unwrap_or(std::mem::take(&mut fields.prefix));
        fields.username = settings.username.or(fields.username.take());
        fields.password = settings.password.or(fields.password.take());
        fields.holder = settings.holder.or(fields.holder.take());
    }};
}
