#![doc = include_str!("../docs.md")]

mod admin;
mod backend;
mod config;
mod connect;
mod election;
mod ends;
mod errors;
mod held;
mod hub;
mod keepalive;
mod keys;
mod lease;
mod listing;
mod observe;
mod ownership;
mod pool;
mod queue;
mod rpc;
mod shared;
mod token;
mod url;
mod view;
mod watch;

pub use backend::EtcdBackend;
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TTL, EtcdConfig,
};
/// The builders of the client settings (`with_prefix`, `with_credentials`, ...).
pub use distlock_core::ClientConfig;
/// The TLS files of [`EtcdConfig::tls_files`], as every backend names them.
pub use distlock_core::raw::TlsFiles;
/// The tracing target of the events for every key and lease the client
/// ends itself, with their revisions.
pub use ends::TARGET as ENDS_TARGET;
/// The `etcd-client` crate this backend is built on, for guarded writes
/// with [`is_owner`] and for [`EtcdBackend::client`].
pub use etcd_client;
pub use keys::{KeyLayout, lease_of_key};
pub use ownership::{is_owner, is_owner_of};
