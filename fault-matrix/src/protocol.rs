//! What clients tell the checking resource: one JSON object per line, each
//! answered by one line.

use serde::{Deserialize, Serialize};

/// Which write of a critical section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Written right after the grant.
    Begin,
    /// Written every few milliseconds while a kept section lasts, each
    /// after `is_held()` said yes, as the docs tell holders to.
    Keep,
    /// Written after holding, right before the release.
    End,
}

/// One critical section of a client: what both of its writes carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// The client's number.
    pub client: u32,
    /// The fencing token of the acquisition.
    pub token: u64,
    /// The client's acquisition counter.
    pub seq: u64,
    /// When the lock was granted ([`now_ns`](super::clock::now_ns)).
    pub granted_ns: u64,
    /// The backend key (or node path) of the acquisition.
    pub key: String,
    /// The lock name the section is under: sections of different names
    /// do not exclude each other.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl Section {
    /// The `phase` write of this section; `held` is what the guard said
    /// at `checked_ns`.
    pub fn write(&self, phase: Phase, held: bool, checked_ns: u64) -> Message {
        Message::Write {
            section: self.clone(),
            phase,
            held,
            checked_ns,
        }
    }
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
        /// The section the write belongs to.
        #[serde(flatten)]
        section: Section,
        /// Which write of the section.
        phase: Phase,
        /// Whether the guard still said it was held when writing.
        held: bool,
        /// When the guard was asked ([`now_ns`](super::clock::now_ns)):
        /// a write vouched for at a moment another client already held a
        /// higher token is a vouched stale write, however late it arrives.
        #[serde(default)]
        checked_ns: u64,
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
        /// The lock name of the acquisition.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        name: String,
    },
    /// History events recorded since the last batch.
    History {
        /// The client's number.
        client: u32,
        /// The events, oldest first.
        events: Vec<super::history::Event>,
        /// When the batch was taken, relative to the origin: the client's
        /// history is complete up to here.
        #[serde(default)]
        until_ns: u64,
        /// The keys and leases the client ended itself since the last
        /// batch, as its backend reported them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ends: Vec<End>,
    },
    /// An operation failed.
    Error {
        /// The client's number.
        client: u32,
        /// `acquire`, `release` or `connect`.
        op: String,
        /// The [`ErrorKind`](distlock_core::ErrorKind) as text.
        kind: String,
        /// When it failed.
        at_ns: u64,
    },
}

/// A key or lease that a client's backend ended at the client's request
/// (a release's delete, a revocation), with the revision at which it took
/// effect where known: what tells the client's own ends from the server's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// The client's number.
    #[serde(default)]
    pub client: u32,
    /// The key deleted, for a release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The lease revoked, for a revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
    /// The revision it took effect at, or `None` when its outcome is not
    /// known (an answer lost): it may have taken effect at any revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_one_flat_json_object() {
        let line = r#"{"type":"write","client":1,"token":10,"seq":2,"granted_ns":5,"key":"k","phase":"end","held":false,"checked_ns":7}"#;
        let message: Message = serde_json::from_str(line).expect("a write parses");
        let section = Section {
            client: 1,
            token: 10,
            seq: 2,
            granted_ns: 5,
            key: "k".into(),
            name: String::new(),
        };
        assert_eq!(message, section.write(Phase::End, false, 7));
        let text = serde_json::to_string(&message).expect("a write serializes");
        let again: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            again,
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
    }
}
