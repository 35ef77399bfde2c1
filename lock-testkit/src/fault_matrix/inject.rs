//! Making each fault happen: on a client (pause, partition, break its
//! lock) or on the servers (kill, freeze, isolate), and healing it.

use std::time::Duration;

use lock_core::LockName;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::clock::now_ns;
use super::faults::Fault;
use super::resource::CheckingResource;
use super::row::Service;
use crate::proxy::FaultProxy;

/// How long the runner tries to catch a client inside its section.
const CATCH_TIMEOUT: Duration = Duration::from_secs(15);

/// When the fault happened, whom it hit and when it was over.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// When the fault began.
    pub start_ns: u64,
    /// When it was healed (or, for a broken lock, when it struck).
    pub heal_ns: u64,
    /// The client kept inside its critical section through the fault.
    pub victim: Option<u32>,
    /// The victim's token.
    pub victim_token: Option<u64>,
    /// When the victim was let out of its section.
    pub victim_release_ns: Option<u64>,
    /// What else the runner noticed.
    pub notes: Vec<String>,
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
    /// The hold time of an ordinary section.
    pub hold: Duration,
    /// The lock the clients contend for.
    pub lock: &'a str,
    /// The member cut off by fault 8, and the clients that use only it.
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
    async fn catch_holder(&self, only: Option<u32>) -> Result<(u32, u64), String> {
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
                            return Ok((client, token));
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

    fn let_go(&self, client: u32, timeline: &mut Timeline) {
        signal(self.pids[client as usize], Signal::SIGUSR2);
        timeline.victim_release_ns = Some(now_ns());
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
                let (victim, token) = self.catch_holder(None).await?;
                (t.victim, t.victim_token) = (Some(victim), Some(token));
                let pid = self.pids[victim as usize];
                signal(pid, Signal::SIGSTOP);
                t.start_ns = now_ns();
                sleep(self.span).await;
                signal(pid, Signal::SIGCONT);
                t.heal_ns = now_ns();
                self.let_go(victim, &mut t);
            }
            Fault::PartitionHolder => {
                let (victim, token) = self.catch_holder(None).await?;
                (t.victim, t.victim_token) = (Some(victim), Some(token));
                let proxies = &self.proxies[victim as usize];
                proxies.iter().for_each(FaultProxy::blackhole);
                t.start_ns = now_ns();
                sleep(self.span).await;
                proxies.iter().for_each(FaultProxy::restore);
                t.heal_ns = now_ns();
                self.let_go(victim, &mut t);
            }
            Fault::SlowNetwork => {
                t.start_ns = now_ns();
                self.jitter(self.span + 2 * ttl).await;
                t.heal_ns = now_ns();
            }
            Fault::KillServer => {
                let (victim, token) = self.catch_holder(None).await?;
                (t.victim, t.victim_token) = (Some(victim), Some(token));
                t.start_ns = now_ns();
                self.service.kill_all().await;
                sleep(ttl).await;
                self.service
                    .restart_all()
                    .await
                    .map_err(|e| format!("restart: {e}"))?;
                t.heal_ns = now_ns();
                sleep(ttl).await;
                self.let_go(victim, &mut t);
            }
            Fault::KillLeader | Fault::FreezeMember | Fault::IsolateFollower => {
                let only = (fault == Fault::IsolateFollower).then_some(0);
                let (victim, token) = self.catch_holder(only).await?;
                (t.victim, t.victim_token) = (Some(victim), Some(token));
                self.member_fault(fault, &mut t).await?;
                sleep(ttl).await;
                self.let_go(victim, &mut t);
            }
            Fault::BreakLock => {
                let (victim, token) = self.catch_holder(None).await?;
                (t.victim, t.victim_token) = (Some(victim), Some(token));
                let key = self
                    .resource
                    .record()
                    .grants
                    .iter()
                    .rev()
                    .find(|g| g.client == victim && g.token == token)
                    .map(|g| g.key.clone())
                    .ok_or("the victim's grant was not recorded")?;
                t.start_ns = now_ns();
                self.break_lock(&key).await?;
                t.heal_ns = now_ns();
                sleep(2 * ttl).await;
                self.let_go(victim, &mut t);
            }
        }
        Ok(t)
    }

    /// Latency of 0 to TTL/4 on every proxy, drawn afresh every 20 ms.
    async fn jitter(&self, length: Duration) {
        let max = (self.ttl / 4).as_micros() as u64;
        let mut seed = now_ns() | 1;
        let until = tokio::time::Instant::now() + length;
        while tokio::time::Instant::now() < until {
            for proxy in self.proxies.iter().flatten() {
                // xorshift64: any spread will do.
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                proxy.delay(Duration::from_micros(seed % max.max(1)));
            }
            sleep(Duration::from_millis(20)).await;
        }
        for proxy in self.proxies.iter().flatten() {
            proxy.delay(Duration::ZERO);
        }
    }

    async fn member_fault(&self, fault: Fault, t: &mut Timeline) -> Result<(), String> {
        let ttl = self.ttl;
        match (fault, self.service) {
            (Fault::KillLeader, Service::Etcd(cluster)) => {
                let leader = cluster.leader_index().await.ok_or("no etcd leader")?;
                t.notes
                    .push(format!("killed etcd member {leader} (the leader)"));
                t.start_ns = now_ns();
                cluster.member(leader).kill().await;
                sleep(2 * ttl).await;
                cluster
                    .member(leader)
                    .restart()
                    .await
                    .map_err(|e| e.to_string())?;
            }
            (Fault::KillLeader, Service::Zk(ensemble)) => {
                let leader = ensemble.leader_index().await.ok_or("no ZooKeeper leader")?;
                t.notes
                    .push(format!("killed ZooKeeper server {leader} (the leader)"));
                t.start_ns = now_ns();
                ensemble.member(leader).kill().await;
                sleep(2 * ttl).await;
                ensemble
                    .member(leader)
                    .restart()
                    .await
                    .map_err(|e| e.to_string())?;
            }
            (Fault::KillLeader, Service::Redlock(servers)) => {
                t.notes
                    .push("killed Redis server 0 of 3; it restarts empty".into());
                t.start_ns = now_ns();
                servers.server(0).kill().await;
                sleep(2 * ttl).await;
                servers
                    .server(0)
                    .restart()
                    .await
                    .map_err(|e| e.to_string())?;
            }
            (Fault::FreezeMember, Service::Etcd(cluster)) => {
                let leader = cluster.leader_index().await.ok_or("no etcd leader")?;
                t.notes
                    .push(format!("froze etcd member {leader} (the leader)"));
                t.start_ns = now_ns();
                cluster.member(leader).pause();
                sleep(self.span).await;
                cluster.member(leader).resume();
            }
            (Fault::FreezeMember, Service::Zk(ensemble)) => {
                let leader = ensemble.leader_index().await.ok_or("no ZooKeeper leader")?;
                t.notes
                    .push(format!("froze ZooKeeper server {leader} (the leader)"));
                t.start_ns = now_ns();
                ensemble.member(leader).pause();
                sleep(self.span).await;
                ensemble.member(leader).resume();
            }
            (Fault::FreezeMember, Service::Redlock(servers)) => {
                t.notes.push("froze Redis server 0 of 3".into());
                t.start_ns = now_ns();
                servers.server(0).pause();
                sleep(self.span).await;
                servers.server(0).resume();
            }
            (Fault::IsolateFollower, Service::Etcd(cluster)) => {
                let f = self.follower.ok_or("no follower chosen")?;
                t.notes.push(format!("cut etcd member {f} off its peers"));
                t.start_ns = now_ns();
                cluster.isolate(f);
                sleep(self.span).await;
                cluster.rejoin(f);
            }
            (Fault::IsolateFollower, Service::Zk(ensemble)) => {
                let f = self.follower.ok_or("no follower chosen")?;
                t.notes
                    .push(format!("cut ZooKeeper server {f} off its peers"));
                t.start_ns = now_ns();
                ensemble.isolate(f);
                sleep(self.span).await;
                ensemble.rejoin(f);
            }
            (fault, service) => {
                return Err(format!("fault {fault} has no form for {service:?}"));
            }
        }
        t.heal_ns = now_ns();
        Ok(())
    }

    /// Ends the holder's lock from outside, as an operator or another
    /// program would.
    async fn break_lock(&self, key: &str) -> Result<(), String> {
        match self.service {
            Service::Etcd(cluster) => {
                let lease = lock_etcd::lease_of_key(key)
                    .ok_or_else(|| format!("no lease in etcd key {key:?}"))?;
                let mut client = lock_etcd::etcd_client::Client::connect(cluster.endpoints(), None)
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
            Service::Redlock(servers) => {
                for server in servers.servers() {
                    server
                        .command(&["DEL", key])
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Service::Zk(ensemble) => {
                let client = lock_zk::zk::Client::connect(&ensemble.connect_string())
                    .await
                    .map_err(|e| e.to_string())?;
                client.delete(key, None).await.map_err(|e| e.to_string())?;
            }
            Service::File(dir) => {
                let backend =
                    lock_file::FileBackend::connect(lock_file::FileConfig::new(dir.path()))
                        .await
                        .map_err(|e| e.to_string())?;
                let name = LockName::new(self.lock).map_err(|e| e.to_string())?;
                backend.expire_now(&name).await.map_err(|e| e.to_string())?;
            }
            Service::None => return Err("memory:// has no lock to break".into()),
        }
        Ok(())
    }
}
