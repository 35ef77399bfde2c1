//! The fault matrix: every backend under every fault users meet, measured
//! with one harness.
//!
//! The runner starts its own servers, a [checking resource](resource) and,
//! per cell, N client processes (`fault-matrix-client`), each reaching the
//! servers through fault proxies of its own. Clients loop acquire → write
//! (begin) → hold → write (end) → release. The resource keeps an unfenced
//! and a fenced view of those writes; a [cell](cell::Cell) is what they and
//! the clients' lost signals show under one [fault](faults::Fault).
//!
//! `memory://` ([`Row::Broken`]) is a lock private to each
//! process: run against it, the detector must fire.

pub mod cell;
pub mod client;
pub mod clock;
pub mod contended;
pub mod failover;
pub mod faults;
pub mod history;
pub mod history_file;
pub mod inject;
pub mod mutant;
pub mod own_ends;
pub mod protocol;
pub mod report;
pub mod resource;
pub mod revocation;
pub mod row;
pub mod run;
pub mod second;
pub mod shape;
pub mod summary;
pub mod timeline;
pub mod usage;
pub mod verdict;

pub use cell::Cell;
pub use contended::Contended;
pub use faults::Fault;
pub use row::Row;
pub use run::{Plan, run_row};
