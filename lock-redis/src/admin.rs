//! The operator's view: inspect, list and force_release, on one server or
//! by majority over Redlock's servers.
//!
//! Each server answers from one script call, so its view is atomic. Over N
//! servers the holder is the owner a majority shows (as for a grant), and
//! its lease left and grant time are the quorum-th best of those servers:
//! the lock stays held while a majority still has the key, and it was held
//! once a majority had granted it. Waiters are the union over the servers.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use distlock_core::WaiterInfo;
use distlock_core::{
    Error, FencingToken, HolderInfo, ListOptions, ListPage, ListedLock, LockName, LockStatus,
    Result,
};
use futures::future::join_all;

use crate::config::Layout;
use crate::keys::Space;
use crate::quorum::gather;
use crate::scripts::SCRIPTS;
use crate::servers::Servers;

/// How many locks a listing inspects at once.
const LIST_BATCH: usize = 64;

/// One server's view of a lock, as the inspect script answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct View {
    /// `None` when the lock is free here.
    owner: Option<String>,
    token: u64,
    /// Grant time in server milliseconds since the epoch.
    since_ms: Option<u64>,
    about: Option<String>,
    /// The token is final (Redlock: confirmed).
    confirmed: bool,
    /// Lease left in milliseconds.
    left_ms: i64,
    /// Waiter id and description.
    waiters: Vec<(String, Option<String>)>,
}

impl View {
    /// Parses the flat reply of the inspect or force-release script.
    fn parse(row: &[String]) -> Option<View> {
        let [owner, token, since, about, ok, left, rest @ ..] = row else {
            return None;
        };
        let text = |s: &String| (!s.is_empty()).then(|| s.clone());
        Some(View {
            owner: text(owner),
            token: token.parse().ok()?,
            since_ms: since.parse().ok(),
            about: text(about),
            confirmed: ok == "1",
            left_ms: left.parse().ok()?,
            waiters: rest
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), text(&pair[1])))
                .collect(),
        })
    }
}

/// The holder a majority (`quorum`) of `views` agrees on, if any.
fn agreed_holder(views: &[View], quorum: usize, key: &str) -> Option<HolderInfo> {
    let owners: Vec<&str> = views.iter().filter_map(|v| v.owner.as_deref()).collect();
    let owner = owners
        .iter()
        .find(|o| owners.iter().filter(|p| p == o).count() >= quorum)?;
    let rows: Vec<&View> = views
        .iter()
        .filter(|v| v.owner.as_deref() == Some(*owner))
        .collect();
    // A confirmed token is the one the holder got; unconfirmed ones are
    // only seen while its confirm round is in flight.
    let token = rows
        .iter()
        .filter(|v| v.confirmed)
        .map(|v| v.token)
        .max()
        .or_else(|| rows.iter().map(|v| v.token).max())?;
    let mut left: Vec<i64> = rows.iter().map(|v| v.left_ms).collect();
    left.sort_unstable_by(|a, b| b.cmp(a));
    let mut since: Vec<u64> = rows.iter().filter_map(|v| v.since_ms).collect();
    since.sort_unstable();
    Some(HolderInfo {
        key: key.to_owned(),
        token: FencingToken(token),
        description: rows.iter().find_map(|v| v.about.clone()),
        acquired_at: since
            .get(quorum - 1)
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(*ms)),
        lease_left: left
            .get(quorum - 1)
            .map(|ms| Duration::from_millis(u64::try_from(*ms).unwrap_or(0))),
    })
}

/// The waiters of every view, each once, in the first view's order.
fn union_of_waiters(views: &[View]) -> Vec<WaiterInfo> {
    let mut seen = BTreeSet::new();
    let mut waiters = Vec::new();
    for (id, about) in views.iter().flat_map(|v| &v.waiters) {
        if seen.insert(id.as_str()) {
            waiters.push(WaiterInfo {
                key: Some(public_waiter_id(id)),
                description: about.clone(),
            });
        }
    }
    waiters
}

/// A waiter id without its owner id (`<instance>/<n>`): the owner id is
/// the credential its grant will carry, so it is not shown.
fn public_waiter_id(id: &str) -> String {
    id.splitn(3, '/').take(2).collect::<Vec<_>>().join("/")
}

impl Servers {
    /// Runs a script that answers a [`View`] on every server, and returns
    /// the views of those that answered (a quorum, else `Unavailable`).
    async fn views(
        &self,
        script: &'static redis::Script,
        keys: &[&str],
        args: &[&[u8]],
        what: &str,
    ) -> Result<Vec<View>> {
        // Answers arrive in any order: each carries its server's address.
        let calls = self
            .nodes
            .iter()
            .map(|node| {
                let call = node.eval::<Option<Vec<String>>>(script, keys, args, what);
                let addr = node.addr().to_owned();
                async move { call.await.map(|row| (addr, row)) }
            })
            .collect();
        let rows = self.quorum_of(gather(calls, |_| false).await, what)?;
        rows.into_iter()
            .map(|(addr, row)| {
                let row = row.unwrap_or_else(free_row);
                View::parse(&row).ok_or_else(|| {
                    Error::backend(format!(
                        "{} at {addr}: {what}: unexpected reply {row:?}",
                        self.backend
                    ))
                })
            })
            .collect()
    }

    /// The holder and waiters of lock `name`, or of its election when the
    /// lock is neither held nor waited for: an operator names either.
    pub(crate) async fn inspect_name(&self, name: &LockName) -> Result<LockStatus> {
        if self.layout == Layout::Plain {
            return crate::plain::inspect(self, name).await;
        }
        let lock = self.inspect(Space::Lock, name).await?;
        if lock.is_held() || lock.waiting > 0 {
            return Ok(lock);
        }
        let election = self.inspect(Space::Election, name).await?;
        Ok(if election.is_held() || election.waiting > 0 {
            election
        } else {
            lock
        })
    }

    /// The holder and waiters of `name` in `space`.
    pub(crate) async fn inspect(&self, space: Space, name: &LockName) -> Result<LockStatus> {
        let keys = self.keys.of(space, name);
        let what = format!("inspecting {} {name}", space.primitive().as_str());
        let mut key_list = keys.state().to_vec();
        if keys.is_election() {
            key_list.push(&keys.leader);
        }
        let views = self.views(&SCRIPTS.inspect, &key_list, &[], &what).await?;
        let waiters = union_of_waiters(&views);
        Ok(LockStatus {
            name: name.clone(),
            primitive: space.primitive(),
            holder: agreed_holder(&views, self.quorum, &keys.owner),
            waiting: waiters.len(),
            waiters,
        })
    }

    /// One page of the locks and elections under `options.prefix` that are
    /// held or waited for.
    pub(crate) async fn list(&self, options: &ListOptions) -> Result<ListPage> {
        if self.layout == Layout::Plain {
            // Its lock keys are bare names among the application's keys.
            return Err(crate::plain::lacks(
                "list: a lock's key is its bare name, which no scan can tell from the application's other keys",
            ));
        }
        let mut candidates = Vec::new();
        for space in [Space::Lock, Space::Election] {
            for name in self.scan_names(space, &options.prefix).await? {
                if options.admits(space.primitive(), &name) {
                    candidates.push((space, name));
                }
            }
        }
        candidates.sort_by(|a, b| (a.0.primitive(), &a.1).cmp(&(b.0.primitive(), &b.1)));
        // Inspect in order only until the page (and one more, to know that
        // another page follows) is full; names whose keys were stale drop out.
        let mut live = Vec::new();
        for batch in candidates.chunks(LIST_BATCH) {
            let statuses = join_all(batch.iter().map(|(space, name)| self.inspect(*space, name)));
            for ((space, _), status) in batch.iter().zip(statuses.await) {
                let status = status?;
                if status.holder.is_some() || status.waiting > 0 {
                    live.push(ListedLock {
                        name: status.name,
                        primitive: space.primitive(),
                        holder_token: status.holder.map(|h| h.token),
                        waiting: status.waiting,
                    });
                }
            }
            if live.len() > options.limit {
                break;
            }
        }
        Ok(options.page(live))
    }

    /// The names in `space` under `prefix` that any server shows held or
    /// waited for: `SCAN MATCH` over each server's whole key space.
    async fn scan_names(&self, space: Space, prefix: &str) -> Result<BTreeSet<LockName>> {
        let pattern = self.keys.scan_pattern(space, prefix);
        let what = format!("listing {}s under {prefix:?}", space.primitive().as_str());
        let scans = join_all(self.nodes.iter().map(|node| node.scan(&pattern, &what))).await;
        let keys = self.quorum_of(scans, &what)?;
        Ok(keys
            .iter()
            .flatten()
            .filter_map(|k| self.keys.live_name(space, k))
            .collect())
    }

    /// Breaks lock `name` on every server, or its election's leadership
    /// when the lock is free; returns the holder a majority showed, if any.
    pub(crate) async fn force_release(&self, name: &LockName) -> Result<Option<HolderInfo>> {
        if self.layout == Layout::Plain {
            return crate::plain::force_release(self, name).await;
        }
        match self.force_release_in(Space::Lock, name).await? {
            Some(evicted) => Ok(Some(evicted)),
            None => self.force_release_in(Space::Election, name).await,
        }
    }

    /// Breaks `name` in `space` on every server; returns the holder a
    /// majority showed, if any.
    async fn force_release_in(&self, space: Space, name: &LockName) -> Result<Option<HolderInfo>> {
        let keys = self.keys.of(space, name);
        let redlock = self.nodes.len() > 1;
        let flags = if redlock { "hr" } else { "h" };
        let released = if redlock {
            keys.released_channel.as_str()
        } else {
            ""
        };
        let wake_prefix = self.keys.wake_prefix();
        let what = format!("breaking {} {name}", space.primitive().as_str());
        let mut key_list = keys.release_order().to_vec();
        key_list.push(&keys.revoked);
        let mut args = vec![
            wake_prefix.as_bytes(),
            flags.as_bytes(),
            released.as_bytes(),
        ];
        if keys.is_election() {
            key_list.push(&keys.leader);
            args.push(keys.leader_channel.as_bytes());
        }
        let views = self
            .views(&SCRIPTS.force_release, &key_list, &args, &what)
            .await?;
        let evicted = agreed_holder(&views, self.quorum, &keys.owner);
        if let Some(holder) = &evicted {
            tracing::info!(backend = self.backend, lock = %name, space = space.primitive().as_str(), token = holder.token.get(), holder = holder.description.as_deref().unwrap_or(""), "lock broken");
        }
        Ok(evicted)
    }
}

/// The inspect script's row of a free lock without waiters.
fn free_row() -> Vec<String> {
    ["", "0", "", "", "0", "0"].map(String::from).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeySpace;
    use crate::{RedlockBackend, RedlockConfig, ServerAddr};
    use distlock_core::ClientConfig;
    use distlock_core::LockBackend;
    use distlock_testkit::proxy::FaultProxy;
    use distlock_testkit::servers::RedisServers;

    fn view(owner: &str, token: u64, confirmed: bool, left_ms: i64, since_ms: u64) -> View {
        View {
            owner: Some(owner.to_owned()),
            token,
            since_ms: Some(since_ms),
            about: Some("worker".to_owned()),
            confirmed,
            left_ms,
            waiters: Vec::new(),
        }
    }

    #[test]
    fn a_majority_names_the_holder_with_its_confirmed_token() {
        let free = View::parse(&free_row()).unwrap();
        let views = [
            view("a", 7, true, 900, 1_000),
            view("a", 9, false, 500, 1_040),
            free.clone(),
        ];
        let holder = agreed_holder(&views, 2, "k").expect("a majority holds");
        assert_eq!(holder.token, FencingToken(7));
        // Held while two servers keep the key; held since the second grant.
        assert_eq!(holder.lease_left, Some(Duration::from_millis(500)));
        assert_eq!(
            holder.acquired_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_040))
        );
        let split = [view("a", 7, true, 900, 1), view("b", 8, true, 900, 1), free];
        assert_eq!(agreed_holder(&split, 2, "k"), None);
    }

    #[test]
    fn waiters_are_the_union_without_owner_ids() {
        let mut one = View::parse(&free_row()).unwrap();
        one.waiters = vec![("i/1/secret/600".into(), Some("w1".into()))];
        let mut two = one.clone();
        two.waiters.push(("j/4/other/600".into(), None));
        let waiters = union_of_waiters(&[one, two]);
        assert_eq!(
            waiters,
            [
                WaiterInfo {
                    key: Some("i/1".into()),
                    description: Some("w1".into())
                },
                WaiterInfo {
                    key: Some("j/4".into()),
                    description: None
                },
            ]
        );
    }

    /// With servers answering in another order than they are configured,
    /// an unexpected reply still names the server that sent it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unexpected_reply_names_the_server_that_sent_it() {
        let servers = RedisServers::start(3)
            .await
            .unwrap_or_else(|e| panic!("cannot start 3 redis-servers: {e}"));
        let [first, _, last] = servers.servers() else {
            unreachable!()
        };
        // The first server answers last.
        let slow = FaultProxy::start(first.addr().parse().expect("server address"))
            .await
            .expect("start fault proxy");
        let mut config = RedlockConfig::new(
            servers
                .servers()
                .iter()
                .map(|s| ServerAddr::new("127.0.0.1", s.port())),
        )
        .with_request_timeout(Duration::from_secs(3));
        config.servers[0] = ServerAddr::new("127.0.0.1", slow.addr().port());
        let name = LockName::new("admin/garbled").unwrap();
        let keys = KeySpace::new(&config.common.prefix, 0).of(Space::Lock, &name);
        let client = RedlockBackend::connect(config).await.expect("connect");
        // The last server holds the lock with a fence that is no number.
        let mut conn = redis::Client::open(last.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the last server");
        let () = redis::pipe()
            .set(&keys.owner, "someone")
            .ignore()
            .set(&keys.fence, "not a number")
            .ignore()
            .query_async(&mut conn)
            .await
            .expect("garble the last server");
        slow.delay(Duration::from_millis(200));
        let error = client.inspect(&name).await.expect_err("a garbled reply");
        let culprit = format!("127.0.0.1:{}", last.port());
        assert!(
            error.to_string().contains(&culprit),
            "the error should name {culprit}: {error}"
        );
    }
}
