#![doc = include_str!("../docs.md")]

mod admin;
mod attempt;
mod backend;
mod case;
mod clock;
mod config;
mod election;
mod errors;
mod flock;
mod held;
mod keys;
mod place;
mod queue;
mod record;
mod renewals;
mod shares;
mod sharing;
mod store;
mod stored_access;
mod wakeups;

pub use backend::FileBackend;
pub use config::{DEFAULT_REQUEST_TIMEOUT, DEFAULT_TTL, FileConfig};
