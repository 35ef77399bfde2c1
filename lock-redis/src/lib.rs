#![doc = include_str!("../docs.md")]

mod acquire_cleanup;
mod admin;
mod attempt;
mod backend;
mod cluster;
mod cluster_config;
mod config;
mod election;
mod endpoint;
mod errors;
mod fair_queue;
mod guarded_write;
mod held;
mod keys;
mod node;
mod plain;
mod quorum;
mod redlock;
mod scripts;
mod servers;
mod url;
mod wakeups;

pub use backend::{RedisBackend, RedisClusterBackend, RedlockBackend};
pub use cluster_config::RedisClusterConfig;
pub use config::{
    CommonConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TTL, Layout, RedisConfig, RedlockConfig, ServerAddr, TlsConfig,
};
/// The builders of the client settings (`with_prefix`, `with_credentials`, ...).
pub use distlock_core::ClientConfig;
/// The TLS files of [`TlsConfig::files`], as every backend names them.
pub use distlock_core::raw::TlsFiles;
pub use guarded_write::GuardedScript;
/// The Redis client these backends use, for the result types of
/// [`RedisBackend::guarded_eval`] ([`redis::FromRedisValue`]).
pub use redis;
