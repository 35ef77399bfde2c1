#![doc = include_str!("../docs.md")]

mod acquire_cleanup;
mod admin;
mod advisory;
mod backend;
mod config;
mod connect;
mod election;
mod errors;
mod fence;
mod keys;
mod lease;
mod migrate;
mod pool;
mod schema;
mod sessions;
mod sql;
mod tls;
mod wakeups;

pub use backend::PostgresBackend;
pub use config::{
    DEFAULT_PORT, DEFAULT_SCHEMA, DEFAULT_TTL, Layout, MIN_TTL, PostgresConfig, SslMode,
};
/// The builders of the client settings (`with_prefix`, `with_credentials`, ...).
pub use distlock_core::ClientConfig;
pub use fence::{Fence, FencedWork};
pub use tokio_postgres;
