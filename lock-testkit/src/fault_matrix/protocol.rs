//! What clients tell the checking resource: one JSON object per line, each
//! answered by one line.

use serde::{Deserialize, Serialize};

/// Which write of a critical section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Written right after the grant.
    Begin,
    /// Written after holding, right before the release.
    End,
}

/// A message from a workload client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Message {
    /// The first message on a connection: who is speaking.
    Hello {
        /// The client's number in the cell.
        client: u32,
        /// Its process id, so the runner can signal it.
        pid: u32,
    },
    /// A write to the protected resource, carrying the fencing token.
    Write {
        /// The client's number.
        client: u32,
        /// The fencing token of the acquisition.
        token: u64,
        /// The client's acquisition counter.
        seq: u64,
        /// Which write of the section.
        phase: Phase,
        /// When the lock was granted ([`now_ns`](super::clock::now_ns)).
        granted_ns: u64,
        /// Whether the guard still said it was held when writing.
        held: bool,
        /// The backend key (or node path) of the acquisition.
        key: String,
    },
    /// The lost signal fired.
    Lost {
        /// The client's number.
        client: u32,
        /// The token of the acquisition that was lost.
        token: u64,
        /// When the signal fired.
        at_ns: u64,
        /// The reason the backend gave.
        reason: String,
    },
    /// An operation failed.
    Error {
        /// The client's number.
        client: u32,
        /// `acquire`, `release` or `connect`.
        op: String,
        /// The [`ErrorKind`](lock_core::ErrorKind) as text.
        kind: String,
        /// When it failed.
        at_ns: u64,
    },
}

/// The resource's answer to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    /// Recorded; for a write, the fenced register accepted it.
    Ok,
    /// The fenced register rejected the write: its token is lower than one
    /// it accepted already.
    Stale,
}
