//! What etcd itself shows of a lease revoked by a leader that had been
//! frozen (etcd 3.4.23, Debian's: upstream etcd issue 15247). The resumed
//! member, deposed while frozen, counts the leases it expires in
//! `etcd_debugging_server_lease_expired_total`; a deposed member that
//! expires any has revoked leases it no longer owned. The matrix reports a
//! late lost signal or a vouched stale write in that cell as this known
//! server bug only when that count rose across the freeze, a healthy
//! member no longer has the lease of the very client it belongs to, and
//! the revision that deleted the hold's key is not one of the client's own
//! ends (a release's delete, or a revocation it asked for, as its backend
//! reported them; see [`own_ends`](super::own_ends)): the server's word,
//! not the client's label, and a lease's end, not merely its absence.

use distlock_testkit::servers::EtcdCluster;

use std::time::Duration;

use distlock_etcd::etcd_client::{Client, EventType, WatchOptions};

use super::cell::Hold;
use super::protocol::End;
use super::row::Service;

/// How long reading the revision that deleted a key may take.
const DELETE_READ: Duration = Duration::from_secs(3);

/// The counter of leases a member expired.
const EXPIRED: &str = "etcd_debugging_server_lease_expired_total";

/// The frozen member and its count of expired leases before the freeze.
#[derive(Debug, Clone)]
pub struct Revocation {
    member: usize,
    expired_before: Option<f64>,
    healthy: Vec<String>,
}

impl Revocation {
    /// Reads the count of `member` (about to be frozen) and notes the
    /// endpoints of the others.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn before_freeze(cluster: &EtcdCluster, member: usize) -> Revocation {
        let expired_before = match cluster.members().get(member) {
            Some(m) => m.metric(EXPIRED, &[]).await.ok(),
            None => None,
        };
        let healthy = cluster
            .endpoints()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != member)
            .map(|(_, e)| e)
            .collect();
        Revocation {
            member,
            expired_before,
            healthy,
        }
    }

    /// Of `holds` (each with the key its grant reported), the ones whose
    /// lease the servers showed ended early after the resume: the resumed
    /// member expired leases, a healthy member no longer has that hold's
    /// lease, and its key was not deleted by one of its client's own `ends`.
    /// Also what they showed, for the cell's notes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn ended_early(
        &self,
        service: &Service,
        holds: &[(Hold, String)],
        ends: &[End],
    ) -> (Vec<Hold>, String) {
        let Service::Etcd(cluster) = service else {
            return (Vec::new(), "not etcd".into());
        };
        let (Some(before), Some(member)) =
            (self.expired_before, cluster.members().get(self.member))
        else {
            return (
                Vec::new(),
                format!("{EXPIRED} unreadable before the freeze"),
            );
        };
        let after = match member.metric(EXPIRED, &[]).await {
            Ok(after) => after,
            Err(e) => {
                return (
                    Vec::new(),
                    format!("{EXPIRED} unreadable after the resume: {e}"),
                );
            }
        };
        let expired = format!("the resumed member expired {} leases", after - before);
        if after <= before || holds.is_empty() {
            return (Vec::new(), expired);
        }
        let mut client =
            match distlock_etcd::etcd_client::Client::connect(self.healthy.clone(), None).await {
                Ok(client) => client,
                Err(e) => return (Vec::new(), format!("{expired}; leases unreadable: {e}")),
            };
        let mut ended = Vec::new();
        let mut seen = Vec::new();
        for (hold, key) in holds {
            let Some(lease) = distlock_etcd::lease_of_key(key) else {
                seen.push(format!("client {}: lease unknown", hold.client));
                continue;
            };
            match client
                .lease_time_to_live(lease, None)
                .await
                .map(|r| r.ttl())
            {
                Ok(ttl) if ttl < 0 => {
                    let deleted = deleted_at(&mut client, key, hold.token).await;
                    match own_end(ends, hold.client, key, lease, deleted) {
                        Some(what) => seen.push(format!(
                            "client {}: lease {lease:#x} gone, key deleted by its own {what}",
                            hold.client
                        )),
                        None => {
                            ended.push(*hold);
                            let at = deleted
                                .map_or("an unread revision".into(), |r| format!("revision {r}"));
                            seen.push(format!(
                                "client {}: lease {lease:#x} gone, key deleted at {at}, not at its client's request",
                                hold.client
                            ));
                        }
                    }
                }
                Ok(ttl) => seen.push(format!(
                    "client {}: lease {lease:#x} has {ttl} s left",
                    hold.client
                )),
                Err(e) => seen.push(format!(
                    "client {}: lease {lease:#x} unreadable: {e}",
                    hold.client
                )),
            }
        }
        seen.sort();
        seen.dedup();
        // A note, not a listing: the many-names row blames dozens of holds.
        const SHOWN: usize = 8;
        if seen.len() > SHOWN {
            let more = seen.len() - SHOWN;
            seen.truncate(SHOWN);
            seen.push(format!("{more} more"));
        }
        (
            ended,
            format!("{expired}; on a healthy member, {}", seen.join(", ")),
        )
    }
}

/// The revision that deleted `key` (created at `created`, the hold's
/// token), from the healthy members' history; `None` if it cannot be read
/// in time.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn deleted_at(client: &mut Client, key: &str, created: u64) -> Option<i64> {
    let created = i64::try_from(created).ok()?;
    let options = WatchOptions::new().with_start_revision(created);
    let read = async {
        let mut stream = client.watch(key, Some(options)).await.ok()?;
        while let Some(message) = stream.message().await.ok()? {
            for event in message.events() {
                if event.event_type() == EventType::Delete {
                    return event.kv().map(|kv| kv.mod_revision());
                }
            }
        }
        None
    };
    tokio::time::timeout(DELETE_READ, read).await.ok().flatten()
}

/// Which of `client`'s own ends deleted `key` (of `lease`) at `deleted`:
/// one at that revision, or one whose revision is not known (it may have
/// been that one); `None` if none did. With the revision unread, any end
/// of the key or lease counts: when in doubt, the trial is not filed as
/// the server's bug.
pub fn own_end(
    ends: &[End],
    client: u32,
    key: &str,
    lease: i64,
    deleted: Option<i64>,
) -> Option<&'static str> {
    ends.iter()
        .filter(|end| end.client == client)
        .filter(|end| match (end.revision, deleted) {
            (Some(at), Some(deleted)) => at == deleted,
            _ => true,
        })
        .find_map(|end| {
            if end.key.as_deref() == Some(key) {
                Some("release")
            } else if end.lease == Some(lease) {
                Some("revocation")
            } else {
                None
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(client: u32, key: Option<&str>, lease: Option<i64>, revision: Option<i64>) -> End {
        End {
            client,
            key: key.map(str::to_owned),
            lease,
            revision,
        }
    }

    /// A key deleted at the revision of its client's own revocation or
    /// release is the client's doing; another client's end, or one at
    /// another revision, is not.
    #[test]
    fn an_end_counts_at_its_revision_and_for_its_client() {
        let ends = [
            end(1, None, Some(0xa), Some(50)),
            end(2, Some("k2"), None, Some(60)),
            end(3, None, Some(0xc), None),
        ];
        assert_eq!(own_end(&ends, 1, "k1", 0xa, Some(50)), Some("revocation"));
        assert_eq!(own_end(&ends, 1, "k1", 0xa, Some(51)), None);
        assert_eq!(own_end(&ends, 2, "k2", 0xb, Some(60)), Some("release"));
        assert_eq!(own_end(&ends, 1, "k2", 0xb, Some(60)), None);
        // An end whose outcome was not known may be the one.
        assert_eq!(own_end(&ends, 3, "k3", 0xc, Some(70)), Some("revocation"));
        // With the delete unread, any end of the key or lease counts.
        assert_eq!(own_end(&ends, 1, "k1", 0xa, None), Some("revocation"));
        assert_eq!(own_end(&ends, 4, "k4", 0xd, None), None);
    }
}
