//! Fault 14: a waiter's turn read on a member cut off from its peers.
//!
//! etcd's revision queue hands the lock on by a delete: the next waiter
//! hears its predecessor's key go, from the member it talks to, and holds.
//! That member may be behind the majority. So the runner builds the one
//! order of events in which what the waiter hears is already untrue: the
//! victim waits, reaching only follower C, and its link is held (bytes
//! kept, the connection open); the holder releases and the queue moves on
//! until the victim's entry heads it on C; C is cut off from its peers,
//! and the majority revokes the victim's lease, so that the next waiter
//! holds; then the victim's link is let go. The victim now hears, from C,
//! that its turn has come, and C, still believing in its leader, shows its
//! entry first. Only a read that C cannot answer without the majority (a
//! linearizable one) keeps the victim from holding beside the next
//! waiter.

use std::time::Duration;

use distlock_etcd::etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use distlock_etcd::lease_of_key;
use nix::sys::signal::Signal;

use super::{Target, Timeline, Victim, signal, sleep};
use crate::clock::now_ns;
use crate::row::Service;

/// How long the head of the queue on C must stay the same, with nobody
/// in a section, before it is taken as the victim's (the only contender
/// that cannot act: its link is held).
const STALL: Duration = Duration::from_millis(100);
/// How long the queue may take to move on to the victim.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound of each request the runner sends to the servers.
const REQUEST: Duration = Duration::from_secs(2);

impl Target<'_> {
    /// Builds the interleaving above, keeps C cut off for the trial's
    /// span, and lets it rejoin.
    pub(super) async fn stale_turn(&self, t: &mut Timeline) -> Result<(), String> {
        let Service::Etcd(cluster) = self.service else {
            return Err("fault 14 is built for etcd".into());
        };
        let cut = self.follower.ok_or("no follower chosen")?;
        let majority: Vec<String> = (0..cluster.members().len())
            .filter(|&i| i != cut)
            .map(|i| cluster.member(i).endpoint())
            .collect();
        let mut on_cut = connect(vec![cluster.member(cut).endpoint()]).await?;
        let mut on_majority = connect(majority).await?;

        let clients = u32::try_from(self.pids.len()).map_err(|e| e.to_string())?;
        let (holder, held) = self.hold_the_next().await?;
        let let_holder_go = || signal(self.pids[holder as usize], Signal::SIGUSR2);
        let queue = match self.victim_key(held) {
            Ok(key) => queue_of(&key).to_owned(),
            Err(e) => {
                let_holder_go();
                return Err(e);
            }
        };
        // The victim's link is held only once its entry is in the queue:
        // held before, the victim could not join, and the queue would move
        // on without it.
        if let Err(e) = all_queued(&mut on_cut, &queue, clients).await {
            let_holder_go();
            return Err(e);
        }
        let link = &self.proxies[self.victim as usize];
        t.start_ns = now_ns();
        link.iter().for_each(|p| p.blackhole());
        let_holder_go();
        let head = match self.head_that_stalls(&mut on_cut, &queue).await {
            Ok(head) => head,
            Err(e) => {
                link.iter().for_each(|p| p.restore());
                return Err(e);
            }
        };
        let lease = lease_of_key(&head).ok_or_else(|| format!("no lease in key {head}"))?;
        self.service.isolate(cut, true)?;
        let cut_ns = now_ns();
        let revoked = tokio::time::timeout(REQUEST, on_majority.lease_revoke(lease)).await;
        // Let go at once: C answers as if it had a leader only until its
        // election timeout runs out.
        link.iter().for_each(|p| p.restore());
        let restored_ns = now_ns();
        match revoked {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => t
                .notes
                .push(format!("revoking lease {lease:#x} failed: {e}")),
            Err(_) => t.notes.push(format!("revoking lease {lease:#x} timed out")),
        }
        t.notes.push(format!(
            "client {}'s link to {} held from {} ms before the cut; client {holder} released; \
             the queue's head on it ({head}) stayed for {} ms; {} cut off its peers, that \
             lease revoked on the majority, and the link let go {} ms after the cut",
            self.victim,
            self.service.member_name(cut),
            (cut_ns - t.start_ns) / 1_000_000,
            STALL.as_millis(),
            self.service.member_name(cut),
            (restored_ns - cut_ns) / 1_000_000,
        ));
        sleep(self.span).await;
        self.service.isolate(cut, false)?;
        t.heal_ns = now_ns();
        t.victim = Some(Victim {
            client: self.victim,
            token: 0,
            release_ns: None,
        });
        Ok(())
    }

    /// The first key of `queue` as member C serves it, once it has stayed
    /// first for [`STALL`] with nobody in a section.
    async fn head_that_stalls(&self, on_cut: &mut Client, queue: &str) -> Result<String, String> {
        let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
        let mut seen: Option<(String, tokio::time::Instant)> = None;
        loop {
            let now = tokio::time::Instant::now();
            if now > deadline {
                return Err(format!(
                    "the queue {queue} never stood still on the cut member within {HEAD_TIMEOUT:?}"
                ));
            }
            let head = first_key(on_cut, queue).await?;
            let busy = self.resource.holder().is_some();
            match (&seen, head) {
                (Some((key, since)), Some(head)) if *key == head && !busy => {
                    if now.duration_since(*since) >= STALL {
                        return Ok(head);
                    }
                }
                (_, Some(head)) => seen = Some((head, now)),
                (_, None) => seen = None,
            }
            sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A client of the servers at `endpoints`, for the runner's own requests.
async fn connect(endpoints: Vec<String>) -> Result<Client, String> {
    tokio::time::timeout(REQUEST, Client::connect(endpoints, None))
        .await
        .map_err(|_| "connecting to etcd timed out".to_owned())?
        .map_err(|e| format!("connect to etcd: {e}"))
}

/// The queue a contender key is in: everything up to its last `/`.
fn queue_of(key: &str) -> &str {
    key.rfind('/').map_or(key, |i| &key[..=i])
}

/// Waits until `queue`, read serializably on the member `client` reaches,
/// holds an entry of each of the `clients` contenders: the holder, kept in
/// its section, and every waiter, the victim among them.
async fn all_queued(client: &mut Client, queue: &str, clients: u32) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let options = GetOptions::new()
        .with_prefix()
        .with_serializable()
        .with_count_only();
    loop {
        let resp = tokio::time::timeout(REQUEST, client.get(queue, Some(options.clone())))
            .await
            .map_err(|_| "counting the queue timed out".to_owned())?
            .map_err(|e| format!("count the queue: {e}"))?;
        if resp.count() >= i64::from(clients) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "only {} of {clients} contenders in the queue {queue} within {HEAD_TIMEOUT:?}",
                resp.count()
            ));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// The key created first under `queue`, read serializably on the member
/// `client` reaches (what a waiter reaching it would see).
async fn first_key(client: &mut Client, queue: &str) -> Result<Option<String>, String> {
    let options = GetOptions::new()
        .with_prefix()
        .with_serializable()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let resp = tokio::time::timeout(REQUEST, client.get(queue, Some(options)))
        .await
        .map_err(|_| "reading the queue timed out".to_owned())?
        .map_err(|e| format!("read the queue: {e}"))?;
    Ok(resp
        .kvs()
        .first()
        .and_then(|kv| kv.key_str().ok())
        .map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::queue_of;

    #[test]
    fn a_contender_key_is_in_the_queue_before_its_lease() {
        assert_eq!(queue_of("/d/lock/a%2Fb/694d8a3b"), "/d/lock/a%2Fb/");
        assert_eq!(queue_of("694d8a3b"), "694d8a3b");
    }
}
