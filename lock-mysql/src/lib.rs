#![doc = include_str!("../docs.md")]

mod acquire_cleanup;
mod admin;
mod backend;
mod backoff;
mod config;
mod connect;
mod election;
mod errors;
mod fence;
mod keys;
mod lease;
mod look;
mod named;
mod pool;
mod schema;
mod sessions;
mod sql;
mod waiter;
mod wake;

pub use backend::MysqlBackend;
pub use config::{
    DEFAULT_PORT, DEFAULT_TABLE_PREFIX, DEFAULT_TTL, Layout, MIN_TTL, MysqlConfig, SslMode,
};
/// The builders of the client settings (`with_prefix`, `with_credentials`, ...).
pub use distlock_core::ClientConfig;
pub use fence::{Fence, FencedWork};
pub use mysql_async;
pub use named::{MAX_NAMED_LEN, named_lock_name};
