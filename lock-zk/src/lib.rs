#![doc = include_str!("../docs.md")]

mod acl;
mod backend;
mod cleanup;
mod config;
mod connect_url;
mod deadline;
mod election;
mod error_map;
mod guarded_write;
mod held;
mod monitor;
mod paths;
mod queue;
mod root;
mod session;
mod vouch;

pub use backend::ZkBackend;
pub use config::{DEFAULT_PORT, DEFAULT_TTL, MIN_SESSION_TIMEOUT, ZkConfig};
pub use connect_url::SCHEME;
pub use guarded_write::{GuardedWrite, WriteOutcome};
pub use paths::NodeLayout;
/// The `zookeeper-client` crate this backend is built on, for
/// [`ZkBackend::client`].
pub use zookeeper_client as zk;
