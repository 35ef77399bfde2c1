#![doc = include_str!("../docs.md")]

mod admin;
mod backend;
mod config;
mod connect;
mod election;
mod errors;
mod fence;
mod keys;
mod lease;
mod pending;
mod pool;
mod schema;
mod sql;
mod wakeups;

pub use backend::PostgresBackend;
pub use config::{DEFAULT_PORT, DEFAULT_SCHEMA, DEFAULT_TTL, MIN_TTL, PostgresConfig, SslMode};
pub use fence::{Fence, FencedWork};
pub use tokio_postgres;
