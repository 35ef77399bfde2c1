#![doc = include_str!("../docs.md")]

mod acl;
mod admin;
mod ahead;
mod backend;
mod cleanup;
mod config;
mod deadline;
mod election;
mod errors;
mod guarded_write;
mod held;
mod keys;
mod monitor;
mod queue;
mod root;
mod session;
mod url;
mod vouch;

pub use backend::ZkBackend;
pub use config::{DEFAULT_PORT, DEFAULT_TTL, MIN_SESSION_TIMEOUT, ZkConfig};
/// The builders of the client settings (`with_prefix`, `with_credentials`, ...).
pub use distlock_core::ClientConfig;
pub use guarded_write::{GuardedWrite, WriteOutcome};
pub use keys::NodeLayout;
pub use url::SCHEME;
/// The `zookeeper-client` crate this backend is built on, for
/// [`ZkBackend::client`].
pub use zookeeper_client as zk;
