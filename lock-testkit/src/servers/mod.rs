//! Real-server launchers: etcd, Redis, Redis Cluster, ZooKeeper, PostgreSQL and MariaDB as child processes.
//!
//! Every launcher starts its servers on free loopback ports, each member with
//! its own temporary directory that holds the data and a log file (the
//! child's stdout and stderr). Construction waits until every member is ready
//! and fails with a [`LaunchError`] that carries the tail of the log when it
//! is not; a missing binary fails with a message naming
//! `scripts/install-servers.sh`. Nothing is ever skipped silently.
//!
//! Members can be killed (`SIGKILL`), restarted on the same ports and data
//! directory, paused (`SIGSTOP`) and resumed (`SIGCONT`). Dropping a launcher
//! kills and reaps its children and removes the directories; no runtime is
//! needed for that.
//!
//! etcd and ZooKeeper members can also be cut off from their peers while
//! their clients still reach them ([`EtcdOptions::isolatable`],
//! [`ZkOptions::isolatable`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock_testkit::servers::LaunchError> {
//! use distlock_testkit::servers::{EtcdCluster, RedisServer, ZkEnsemble};
//!
//! let etcd = EtcdCluster::start(3).await?;
//! let redis = RedisServer::start().await?;
//! let zk = ZkEnsemble::start(1).await?;
//! println!("{:?} {} {}", etcd.endpoints(), redis.url(), zk.connect_string());
//! # Ok(())
//! # }
//! ```

mod binary;
pub mod certs;
mod error;
pub mod etcd;
mod etcd_auth;
mod http;
pub mod mariadb;
mod member;
mod netns;
mod ports;
pub mod postgres;
mod process;
mod readiness;
pub mod redis;
pub mod redis_cluster;
mod resp;
mod unix_relay;
mod workdir;
pub mod zk;

pub use error::LaunchError;
pub use etcd::{EtcdCluster, EtcdMember, EtcdOptions};
pub use etcd_auth::etcdctl_path;
pub use mariadb::{MariadbOptions, MariadbServer};
pub use member::Member;
pub use postgres::{PostgresOptions, PostgresServer};
pub use redis::{RedisOptions, RedisServer, RedisServers};
pub use redis_cluster::{RedisCluster, RedisClusterNode, RedisClusterOptions};
pub use resp::RespReply;
pub use workdir::temp_dir;
pub use zk::{ZkEnsemble, ZkMember, ZkOptions};
