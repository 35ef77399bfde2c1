//! What etcd itself shows of a lease revoked by a leader that had been
//! frozen (etcd 3.4.23, Debian's: upstream etcd issue 15247). The resumed
//! member, deposed while frozen, counts the leases it expires in
//! `etcd_debugging_server_lease_expired_total`; a deposed member that
//! expires any has revoked leases it no longer owned. The matrix reports a
//! late lost signal or a vouched stale write in that cell as this known
//! server bug only when that count rose across the freeze and a healthy
//! member no longer has the lease of the very client it belongs to: the
//! server's word, not the client's label.

use distlock_testkit::servers::EtcdCluster;

use super::cell::Hold;
use super::row::Service;

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
    /// member expired leases, and a healthy member no longer has that
    /// hold's lease. Also what they showed, for the cell's notes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn ended_early(
        &self,
        service: &Service,
        holds: &[(Hold, String)],
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
                    ended.push(*hold);
                    seen.push(format!("client {}: lease {lease:#x} gone", hold.client));
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
