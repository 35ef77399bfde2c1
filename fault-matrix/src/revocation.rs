//! What etcd itself shows of a lease revoked by a leader that had been
//! frozen (etcd 3.4.23, Debian's: upstream etcd issue 15247). The resumed
//! member, deposed while frozen, counts the leases it expires in
//! `etcd_debugging_server_lease_expired_total`; a deposed member that
//! expires any has revoked leases it no longer owned. The matrix reports a
//! late lost signal or a vouched stale write in that cell as this known
//! server bug only when that count rose across the freeze and a healthy
//! member no longer has the victim's lease: the server's word, not the
//! client's label.

use distlock_testkit::servers::EtcdCluster;

use super::inject::{Target, Victim};
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

    /// Whether the servers showed the bug after the resume (the resumed
    /// member expired leases, and the victim's lease is gone on a healthy
    /// member), and what they showed, for the cell's notes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn shown(&self, target: &Target<'_>, victim: Victim) -> (bool, String) {
        let Service::Etcd(cluster) = target.service else {
            return (false, "not etcd".into());
        };
        let (Some(before), Some(member)) =
            (self.expired_before, cluster.members().get(self.member))
        else {
            return (false, format!("{EXPIRED} unreadable before the freeze"));
        };
        let after = match member.metric(EXPIRED, &[]).await {
            Ok(after) => after,
            Err(e) => return (false, format!("{EXPIRED} unreadable after the resume: {e}")),
        };
        let expired = format!("the resumed member expired {} leases", after - before);
        if after <= before {
            return (false, expired);
        }
        let Some(lease) = target
            .victim_key(victim)
            .ok()
            .and_then(|key| distlock_etcd::lease_of_key(&key))
        else {
            return (false, format!("{expired}; the victim's lease is unknown"));
        };
        let client = distlock_etcd::etcd_client::Client::connect(self.healthy.clone(), None).await;
        let ttl = match client {
            Ok(mut client) => client
                .lease_time_to_live(lease, None)
                .await
                .map(|r| r.ttl()),
            Err(e) => Err(e),
        };
        match ttl {
            Ok(ttl) if ttl < 0 => (
                true,
                format!("{expired}; a healthy member no longer has the victim's lease {lease:#x}"),
            ),
            Ok(ttl) => (
                false,
                format!("{expired}; the victim's lease {lease:#x} has {ttl} s left"),
            ),
            Err(e) => (
                false,
                format!("{expired}; lease {lease:#x} unreadable: {e}"),
            ),
        }
    }
}
