#![doc = include_str!("../docs.md")]

mod admin;
mod attempt;
mod backend;
mod config;
mod election;
mod errors;
mod fair_queue;
mod held;
mod keys;
mod node;
mod pending;
mod quorum;
mod redlock;
mod scripts;
mod servers;
mod url;
mod wakeups;

pub use backend::{RedisBackend, RedlockBackend};
pub use config::{
    CommonConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TTL, RedisConfig, RedlockConfig, ServerAddr, TlsConfig,
};
