//! Making each fault happen: on a client (pause, partition, break its
//! lock) or on the servers (kill, freeze, isolate), and healing it.

use std::time::Duration;

use distlock_core::LockName;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::clock::now_ns;
use super::failover::{Failover, FailoverError};
use super::faults::Fault;
use super::resource::CheckingResource;
use super::revocation::Revocation;
use super::row::Service;
use super::shape::KillAt;
use distlock_mysql::Layout as MysqlLayout;
use distlock_postgres::Layout;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::mariadb::TEST_DATABASE;
use distlock_testkit::servers::{MariadbServer, PostgresServer, RedisCluster};

mod stale_turn;
mod waiter;

/// How long the runner tries to catch a client inside its section.
const CATCH_TIMEOUT: Duration = Duration::from_secs(15);
/// Seeds the slow network's delays, so that every run draws the same ones.
const JITTER_SEED: u64 = 0x5eed_fa17;

/// When the fault happened, whom it hit and when it was over.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// When the fault began.
    pub start_ns: u64,
    /// When it was healed (or, for a broken lock, when it struck).
    pub heal_ns: u64,
    /// The client kept inside its critical section through the fault.
    pub victim: Option<Victim>,
    /// What else the runner noticed.
    pub notes: Vec<String>,
    /// The frozen etcd member's count read before the freeze: the runner
    /// asks it after the trial which clients' leases the resumed member
    /// ended early.
    pub revocation: Option<Revocation>,
}

/// The client a fault kept inside its critical section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    /// Its client number.
    pub client: u32,
    /// The token of the section it was kept in.
    pub token: u64,
    /// When it was let out of that section.
    pub release_ns: Option<u64>,
}

impl Timeline {
    /// When every client runs freely again: the heal, or the victim's
    /// release if that came later.
    pub fn resume_ns(&self) -> u64 {
        let release = self.victim.and_then(|v| v.release_ns);
        release.unwrap_or(self.heal_ns).max(self.heal_ns)
    }
}

/// What a fault acts on.
#[derive(Debug)]
pub struct Target<'a> {
    /// The servers.
    pub service: &'a Service,
    /// The checking resource (it knows who holds).
    pub resource: &'a CheckingResource,
    /// Process ids by client number.
    pub pids: &'a [u32],
    /// Each client's fault proxies, one per member.
    pub proxies: &'a [Vec<FaultProxy>],
    /// The lease TTL.
    pub ttl: Duration,
    /// How long a pause, partition, freeze or cut-off lasts.
    pub span: Duration,
    /// How long a paused or partitioned victim stays in its section after
    /// the heal.
    pub linger: Duration,
    /// The client to keep inside its section through the fault.
    pub victim: u32,
    /// Fault 10: when the victim is killed.
    pub kill: KillAt,
    /// The hold time of an ordinary section.
    pub hold: Duration,
    /// Fault 13: how long after the waiter's pause the holder releases.
    pub handover: Duration,
    /// The lock the clients contend for.
    pub lock: &'a str,
    /// The member cut off by faults 8 and 14 (or paused by 11), which only
    /// some clients use.
    pub follower: Option<usize>,
}

fn signal(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}

impl Target<'_> {
    /// Keeps a client inside its critical section (`SIGUSR1`) and waits
    /// until it is in one; `only` picks the client, else the holder now.
    async fn catch_holder(&self, only: Option<u32>) -> Result<Victim, String> {
        let deadline = tokio::time::Instant::now() + CATCH_TIMEOUT;
        loop {
            let candidate = match only {
                Some(c) => Some(c),
                None => self.resource.holder(),
            };
            if let Some(client) = candidate {
                signal(self.pids[client as usize], Signal::SIGUSR1);
                // Its current section or its next one is now extended.
                let wait_until = tokio::time::Instant::now() + CATCH_TIMEOUT / 3;
                while tokio::time::Instant::now() < wait_until {
                    if let Some((seq, token)) = self.resource.open_section(client) {
                        sleep(self.hold + Duration::from_millis(50)).await;
                        if self.resource.is_open(client, seq) {
                            return Ok(Victim {
                                client,
                                token,
                                release_ns: None,
                            });
                        }
                    }
                    sleep(Duration::from_millis(5)).await;
                }
                signal(self.pids[client as usize], Signal::SIGUSR2);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "no client could be caught inside its critical section within {CATCH_TIMEOUT:?}"
                ));
            }
            sleep(Duration::from_millis(5)).await;
        }
    }

    /// Lets the victim out of its section and records it in `timeline`.
    fn let_go(&self, victim: Victim, timeline: &mut Timeline) {
        signal(self.pids[victim.client as usize], Signal::SIGUSR2);
        timeline.victim = Some(Victim {
            release_ns: Some(now_ns()),
            ..victim
        });
    }

    /// Runs `fault` from start to heal.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled fault may leave a client stopped, a
    /// proxy blackholed or a server down; drop the cell's clients and
    /// service after cancelling.
    pub async fn run(&self, fault: Fault) -> Result<Timeline, String> {
        let ttl = self.ttl;
        let mut t = Timeline::default();
        match fault {
            Fault::None => {
                t.start_ns = now_ns();
                t.heal_ns = t.start_ns;
            }
            Fault::PauseHolder => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                let pid = self.pids[victim.client as usize];
                signal(pid, Signal::SIGSTOP);
                t.start_ns = now_ns();
                sleep(self.span).await;
                signal(pid, Signal::SIGCONT);
                t.heal_ns = now_ns();
                sleep(self.linger).await;
                self.let_go(victim, &mut t);
            }
            Fault::PartitionHolder => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                let proxies = &self.proxies[victim.client as usize];
                proxies.iter().for_each(FaultProxy::blackhole);
                t.start_ns = now_ns();
                sleep(self.span).await;
                proxies.iter().for_each(FaultProxy::restore);
                t.heal_ns = now_ns();
                sleep(self.linger).await;
                self.let_go(victim, &mut t);
            }
            Fault::SlowNetwork => {
                t.start_ns = now_ns();
                self.jitter(self.span + 2 * ttl).await;
                t.heal_ns = now_ns();
            }
            Fault::KillServer => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                match self.service {
                    Service::RedisCluster(cluster) => {
                        let key = self.victim_key(victim)?;
                        self.fail_over(cluster, &key, &mut t)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    _ => self.restart_every_server(&mut t).await?,
                }
                self.let_go(victim, &mut t);
            }
            Fault::KillLeader | Fault::FreezeMember | Fault::IsolateFollower => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                self.member_fault(fault, &mut t).await?;
                sleep(ttl).await;
                self.let_go(victim, &mut t);
            }
            Fault::KillClient => self.kill_client(&mut t).await?,
            Fault::PauseServer => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                self.pause_server(&mut t).await?;
                sleep(ttl).await;
                self.let_go(victim, &mut t);
            }
            Fault::BriefOutage => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                self.brief_outage(&mut t).await?;
                self.let_go(victim, &mut t);
            }
            Fault::PauseWaiter => self.pause_waiter(&mut t).await?,
            Fault::StaleTurn => self.stale_turn(&mut t).await?,
            Fault::BreakLock => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                let key = self.victim_key(victim)?;
                t.start_ns = now_ns();
                self.break_lock(&key, victim.token).await?;
                t.heal_ns = now_ns();
                sleep(2 * ttl).await;
                self.let_go(victim, &mut t);
            }
        }
        Ok(t)
    }

    /// Kills the victim with `SIGKILL` where the trial's shape says: in its
    /// section, as it releases, or while it waits; then watches the others
    /// for 1.5×TTL, in which the lock must come free.
    async fn kill_client(&self, t: &mut Timeline) -> Result<(), String> {
        let pid = self.pids[self.victim as usize];
        let (victim, note) = match self.kill {
            KillAt::InSection => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                signal(pid, Signal::SIGKILL);
                (victim, "killed inside its section")
            }
            KillAt::AtRelease => {
                let victim = self.catch_holder(Some(self.victim)).await?;
                signal(pid, Signal::SIGUSR2);
                sleep(Duration::from_micros(500)).await;
                signal(pid, Signal::SIGKILL);
                (victim, "killed as it left its section and released")
            }
            KillAt::Waiting => {
                let deadline = tokio::time::Instant::now() + CATCH_TIMEOUT;
                while self.resource.holder().is_none_or(|h| h == self.victim) {
                    if tokio::time::Instant::now() > deadline {
                        return Err("no other client held the lock to wait on".into());
                    }
                    sleep(Duration::from_millis(2)).await;
                }
                signal(pid, Signal::SIGKILL);
                let victim = Victim {
                    client: self.victim,
                    token: 0,
                    release_ns: None,
                };
                (victim, "killed while it waited to acquire")
            }
        };
        t.start_ns = now_ns();
        self.resource.end_section_of_dead(victim.client);
        t.victim = Some(victim);
        t.notes.push(format!("client {}: {note}", victim.client));
        sleep(self.ttl + self.ttl / 2).await;
        t.heal_ns = now_ns();
        Ok(())
    }

    /// Kills every server, restarts them a TTL later, and holds the
    /// victim on for a TTL after that.
    async fn restart_every_server(&self, t: &mut Timeline) -> Result<(), String> {
        t.start_ns = now_ns();
        self.service.kill_all().await;
        sleep(self.ttl).await;
        self.service
            .restart_all()
            .await
            .map_err(|e| format!("restart: {e}"))?;
        t.heal_ns = now_ns();
        sleep(self.ttl).await;
        Ok(())
    }

    /// Pauses the server the victim talks to (the one server, or the
    /// follower only it and the other even clients use) for the trial's
    /// span, then resumes it.
    async fn pause_server(&self, t: &mut Timeline) -> Result<(), String> {
        let index = self.follower.unwrap_or(0);
        let member = self.service.member(index).ok_or("no server to pause")?;
        let which = if self.follower.is_some() {
            " (a follower; the victim reaches no other member)"
        } else {
            ""
        };
        t.notes.push(format!(
            "paused {}{which} for {} ms",
            self.service.member_name(index),
            self.span.as_millis()
        ));
        t.start_ns = now_ns();
        member.pause();
        sleep(self.span).await;
        member.resume();
        t.heal_ns = now_ns();
        Ok(())
    }

    /// Kills every server, restarts them on their data after the trial's
    /// span (less than a TTL), and holds the victim on for a TTL after
    /// they serve again. The note gives the whole outage, restart
    /// included.
    async fn brief_outage(&self, t: &mut Timeline) -> Result<(), String> {
        t.start_ns = now_ns();
        self.service.kill_all().await;
        sleep(self.span).await;
        self.service
            .restart_all()
            .await
            .map_err(|e| format!("restart: {e}"))?;
        t.heal_ns = now_ns();
        let empty = if self.service.restarts_empty() {
            "; they restarted empty"
        } else {
            ""
        };
        t.notes.push(format!(
            "every server killed, restarted after {} ms, serving again after {} ms{empty}",
            self.span.as_millis(),
            (t.heal_ns - t.start_ns) / 1_000_000
        ));
        sleep(self.ttl).await;
        Ok(())
    }

    /// The key of the lock the victim holds, as its grant reported it.
    pub fn victim_key(&self, victim: Victim) -> Result<String, String> {
        self.resource
            .record()
            .grants
            .iter()
            .rev()
            .find(|g| g.client == victim.client && g.token == victim.token)
            .map(|g| g.key.clone())
            .ok_or_else(|| "the victim's grant was not recorded".to_owned())
    }

    /// Fails over the master that owns `key`'s slot: the fault begins at
    /// its kill and is healed once a replica serves the slot. The old
    /// master then restarts and rejoins as a replica, and the victim holds
    /// on until a TTL after the heal, as after the other rows' restarts.
    async fn fail_over(
        &self,
        cluster: &RedisCluster,
        key: &str,
        t: &mut Timeline,
    ) -> Result<(), FailoverError> {
        let failover = Failover::of(cluster, key).await?;
        t.start_ns = now_ns();
        let took = failover.kill().await?;
        t.heal_ns = now_ns();
        let healed = tokio::time::Instant::now();
        t.notes.push(format!(
            "killed {}, the master of the lock's slot; a replica served its slots {} ms later",
            failover.master(),
            took.as_millis()
        ));
        failover.rejoin().await?;
        t.notes
            .push(format!("{} rejoined as a replica", failover.master()));
        tokio::time::sleep_until(healed + self.ttl).await;
        Ok(())
    }

    /// Latency of 0 to TTL/4 on every proxy, drawn afresh every 20 ms.
    async fn jitter(&self, length: Duration) {
        let max = (self.ttl / 4).as_micros() as u64;
        let mut rng = StdRng::seed_from_u64(JITTER_SEED);
        let until = tokio::time::Instant::now() + length;
        while tokio::time::Instant::now() < until {
            for proxy in self.proxies.iter().flatten() {
                proxy.delay(Duration::from_micros(rng.random_range(0..max.max(1))));
            }
            sleep(Duration::from_millis(20)).await;
        }
        for proxy in self.proxies.iter().flatten() {
            proxy.delay(Duration::ZERO);
        }
    }

    /// Kills or freezes the leader (Redlock: server 0), or cuts the chosen
    /// follower off its peers, and heals it.
    async fn member_fault(&self, fault: Fault, t: &mut Timeline) -> Result<(), String> {
        let service = self.service;
        if !matches!(
            service,
            Service::Etcd(_) | Service::Zk(_) | Service::Redlock(_)
        ) {
            return Err(format!("fault {fault} has no form for {service:?}"));
        }
        if fault == Fault::IsolateFollower {
            let f = self.follower.ok_or("no follower chosen")?;
            t.notes
                .push(format!("cut {} off its peers", service.member_name(f)));
            t.start_ns = now_ns();
            service.isolate(f, true)?;
            sleep(self.span).await;
            service.isolate(f, false)?;
            t.heal_ns = now_ns();
            return Ok(());
        }
        let (index, what) = match service {
            Service::Redlock(_) => (0, service.member_name(0)),
            _ => {
                let leader = service.leader_index().await.ok_or("no leader")?;
                (
                    leader,
                    format!("{} (the leader)", service.member_name(leader)),
                )
            }
        };
        let member = service.member(index).ok_or("no such member")?;
        t.start_ns = now_ns();
        match fault {
            Fault::KillLeader => {
                let empty = if service.restarts_empty() {
                    "; it restarts empty"
                } else {
                    ""
                };
                t.notes.push(format!("killed {what}{empty}"));
                member.kill().await;
                sleep(2 * self.ttl).await;
                member.restart().await.map_err(|e| e.to_string())?;
            }
            _ => {
                t.notes.push(format!("froze {what}"));
                if let Service::Etcd(cluster) = service {
                    t.revocation = Some(Revocation::before_freeze(cluster, index).await);
                }
                member.pause();
                sleep(self.span).await;
                member.resume();
            }
        }
        t.heal_ns = now_ns();
        Ok(())
    }

    /// Ends the holder's lock from outside, as an operator or another
    /// program would.
    async fn break_lock(&self, key: &str, token: u64) -> Result<(), String> {
        match self.service {
            Service::Etcd(cluster) => {
                let lease = distlock_etcd::lease_of_key(key)
                    .ok_or_else(|| format!("no lease in etcd key {key:?}"))?;
                let mut client =
                    distlock_etcd::etcd_client::Client::connect(cluster.endpoints(), None)
                        .await
                        .map_err(|e| e.to_string())?;
                client
                    .lease_revoke(lease)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Service::Redis(server) => {
                server
                    .command(&["DEL", key])
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Service::RedisCluster(cluster) => {
                let master = cluster
                    .master_for_key(key)
                    .await
                    .map_err(|e| e.to_string())?;
                master
                    .command(&["DEL", key])
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Service::Redlock(servers) => {
                for server in servers.servers() {
                    server
                        .command(&["DEL", key])
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Service::Zk(ensemble) => {
                let client = distlock_zk::zk::Client::connect(&ensemble.connect_string())
                    .await
                    .map_err(|e| e.to_string())?;
                client.delete(key, None).await.map_err(|e| e.to_string())?;
            }
            Service::File(dir) => {
                let backend =
                    distlock_file::FileBackend::connect(distlock_file::FileConfig::new(dir.path()))
                        .await
                        .map_err(|e| e.to_string())?;
                let name = LockName::new(self.lock).map_err(|e| e.to_string())?;
                backend.expire_now(&name).await.map_err(|e| e.to_string())?;
            }
            Service::Postgres(server, Layout::Advisory) => terminate_holder(server, key)?,
            Service::Postgres(server, _) => {
                let sql = format!(
                    "DELETE FROM {}.entries WHERE token = {token}",
                    distlock_postgres::DEFAULT_SCHEMA
                );
                let server_query = server.query(&sql);
                server_query.map_err(|e| e.to_string())?;
            }
            Service::Mysql(server, MysqlLayout::Named) => kill_holder(server, key)?,
            Service::Mysql(server, _) => delete_entry(server, key, token)?,
            Service::None => return Err("memory:// has no lock to break".into()),
        }
        Ok(())
    }
}

/// Deletes the grant of `key` with `token` from the MySQL lock table, as
/// an operator's `DELETE` would: the next waiter may be granted at once,
/// and the holder learns at its next renewal.
fn delete_entry(server: &MariadbServer, key: &str, token: u64) -> Result<(), String> {
    if key.contains(['\\', '\'']) {
        return Err(format!(
            "{key:?} cannot be quoted as a MySQL string literal"
        ));
    }
    let sql = format!(
        "DELETE FROM {TEST_DATABASE}.{}entries WHERE k = '{key}' AND token = {token} \
         AND granted; SELECT ROW_COUNT();",
        distlock_mysql::DEFAULT_TABLE_PREFIX
    );
    match server.query(&sql).map_err(|e| e.to_string())?.as_str() {
        "1" => Ok(()),
        n => Err(format!("{n} grants of {key} had token {token}, not one")),
    }
}

/// Ends the session that holds the named lock `key` (`named:NAME`, as the
/// grant reports it), as an operator's `KILL CONNECTION` would: the server
/// frees the lock at once, and its holder learns at its next check.
fn kill_holder(server: &MariadbServer, key: &str) -> Result<(), String> {
    let name = key
        .strip_prefix("named:")
        .ok_or_else(|| format!("{key:?} is not a named lock key"))?;
    if name.contains(['\\', '\'']) {
        return Err(format!(
            "{name:?} cannot be quoted as a MySQL string literal"
        ));
    }
    let id = server
        .query(&format!("SELECT IS_USED_LOCK('{name}')"))
        .map_err(|e| e.to_string())?;
    if id.parse::<u64>().is_err() {
        return Err(format!(
            "no session holds named lock {name} (IS_USED_LOCK: {id})"
        ));
    }
    server
        .query(&format!("KILL CONNECTION {id}"))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Ends the session that holds the advisory lock `key` (`advisory:K`, as
/// the grant reports it), as an operator's `pg_terminate_backend` would:
/// the server frees the lock at once, and its holder learns at its next
/// check.
fn terminate_holder(server: &PostgresServer, key: &str) -> Result<(), String> {
    let k: i64 = key
        .strip_prefix("advisory:")
        .and_then(|k| k.parse().ok())
        .ok_or_else(|| format!("{key:?} is not an advisory lock key"))?;
    let sql = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' \
         AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = {k}"
    );
    match server.query(&sql).map_err(|e| e.to_string())?.as_str() {
        "1" => Ok(()),
        n => Err(format!("{n} sessions held advisory lock {k}, not one")),
    }
}
