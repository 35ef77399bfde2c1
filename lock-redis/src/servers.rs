//! The servers behind one backend instance, and the operations that run on
//! all of them: one server for `redis://`, one cluster (a single node whose
//! client routes each call to the lock's master) for `redis+cluster://`, N
//! independent ones with a majority quorum for `redlock://`.
//!
//! With one node the quorum is 1 and every operation is a single script
//! call; the same code serves every mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::join_all;

use crate::quorum::{gather, vote_decided};
use distlock_core::raw::{Renewer, SentAt, drift_allowance};
use distlock_core::{
    Access, AcquireOptions, Error, ErrorKind, FencingToken, LeaderInfo, LockGuard, LockName, Result,
};
use redis::Script;

use crate::config::{CommonConfig, Layout, ServerAddr};
use crate::keys::{KeySpace, LockKeys, Space};
use crate::node::{At, Node};
use crate::scripts::SCRIPTS;
use crate::{fair_queue, held, plain, redlock};

/// A random 128-bit id: the value of a held lock key.
pub(crate) fn new_owner_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What a successful acquisition got.
#[derive(Debug, Clone)]
pub(crate) struct Granted {
    pub(crate) owner: String,
    pub(crate) token: u64,
    /// When the winning request was sent, on the lease clock: validity
    /// counts from here.
    pub(crate) sent: SentAt,
}

/// One acquisition request.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    pub(crate) name: &'a LockName,
    pub(crate) keys: LockKeys,
    /// What is asked for: [`Access::Write`] for locks and elections.
    pub(crate) access: Access,
    pub(crate) ttl: Duration,
    pub(crate) wait: distlock_core::Wait,
    /// The leader value, for elections.
    pub(crate) value: Option<&'a [u8]>,
    /// The holder description stored with the grant.
    pub(crate) about: String,
}

impl Request<'_> {
    /// What is acquired, for messages: `lock x`, or the shared access
    /// (`a permit of semaphore x (limit 3)`).
    pub(crate) fn subject(&self) -> String {
        if self.keys.space.is_shared() {
            self.access.describe(self.name)
        } else {
            format!("lock {}", self.name)
        }
    }

    /// The key a guard names: the holders of a semaphore or the readers of
    /// a read-write lock, else the owner key.
    pub(crate) fn held_key(&self) -> &str {
        if self.keys.space.is_shared() && self.access != Access::Write {
            &self.keys.holders
        } else {
            &self.keys.owner
        }
    }
}

/// Which backend a [`Servers`] serves. The mode, not the number of
/// servers, decides the algorithm: a Redlock over one server is still a
/// Redlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One server (`redis://`): each lock on it, with a FIFO wait queue.
    Single,
    /// A Redis Cluster (`redis+cluster://`): each lock on its slot's master,
    /// as on one server.
    Cluster,
    /// A majority of independent servers (`redlock://`); waiters race.
    Redlock,
}

impl Mode {
    /// The backend's name in capabilities and messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Single => "redis",
            Mode::Cluster => "redis-cluster",
            Mode::Redlock => "redlock",
        }
    }

    /// Whether each lock lives on one node, which keeps its wait queue and
    /// holder set: what FIFO waiting, semaphores and read-write locks need.
    pub(crate) fn is_one_node(self) -> bool {
        self != Mode::Redlock
    }
}

/// The servers of one backend instance.
#[derive(Debug)]
pub(crate) struct Servers {
    pub(crate) mode: Mode,
    /// `mode`'s name, for messages.
    pub(crate) backend: &'static str,
    pub(crate) nodes: Vec<Node>,
    pub(crate) quorum: usize,
    pub(crate) keys: KeySpace,
    pub(crate) default_ttl: Duration,
    /// Limit on one command, also on waiting for subscriptions.
    pub(crate) request_timeout: Duration,
    /// The configured holder description (`holder` setting).
    holder: Option<String>,
    /// Whether lock waiters queue (`fair` setting); semaphores and
    /// read-write locks always do, Redlock waiters never.
    pub(crate) fair: bool,
    /// Whose keys locks live in (`layout` setting).
    pub(crate) layout: Layout,
    instance: String,
    waiter_seq: AtomicU64,
    /// Renews the leases of every lock this backend holds, from one task per runtime.
    pub(crate) renewer: Renewer,
}

impl Servers {
    /// Connects to every server and checks that a quorum is reachable and
    /// accepts our credentials, within the connect timeout.
    pub(crate) async fn connect(
        mode: Mode,
        addrs: &[ServerAddr],
        common: &CommonConfig,
    ) -> Result<Arc<Servers>> {
        let backend = mode.name();
        Self::connect_nodes(mode, common, |channel| {
            addrs
                .iter()
                .map(|addr| Node::new(backend, At::Server(addr), common, channel.to_owned()))
                .collect()
        })
        .await
    }

    /// Connects to a Redis Cluster through its `seeds`: one node, as a
    /// single server is, whose commands the cluster client routes.
    pub(crate) async fn connect_cluster(
        seeds: &[ServerAddr],
        common: &CommonConfig,
    ) -> Result<Arc<Servers>> {
        Self::connect_nodes(Mode::Cluster, common, |channel| {
            let node = Node::new(
                Mode::Cluster.name(),
                At::Cluster(seeds),
                common,
                channel.to_owned(),
            )?;
            Ok(vec![node])
        })
        .await
    }

    /// Connects to the nodes `make` sets up for the instance's wake-up
    /// channel, as [`connect`](Self::connect).
    async fn connect_nodes(
        mode: Mode,
        common: &CommonConfig,
        make: impl FnOnce(&str) -> Result<Vec<Node>>,
    ) -> Result<Arc<Servers>> {
        common.validate()?;
        let instance = format!("{:016x}", rand::random::<u64>());
        crate::config::refuse_plain_beyond_one_server(common, mode)?;
        let keys = match common.layout {
            Layout::Distlock => KeySpace::new(&common.prefix, common.db),
            Layout::Plain => KeySpace::plain(&common.prefix, common.db),
        };
        let nodes = make(&format!("{}{}", keys.wake_prefix(), instance))?;
        let servers = Servers {
            mode,
            backend: mode.name(),
            quorum: nodes.len() / 2 + 1,
            nodes,
            keys,
            default_ttl: common.default_ttl,
            request_timeout: common.request_timeout,
            holder: common.holder.clone(),
            fair: common.fair && mode.is_one_node(),
            layout: common.layout,
            instance,
            waiter_seq: AtomicU64::new(0),
            renewer: Renewer::new(),
        };
        let probes = join_all(servers.nodes.iter().map(Node::probe)).await;
        let mut failures = Vec::new();
        for result in probes {
            if let Err(e) = result {
                if matches!(e.kind(), ErrorKind::Unauthorized | ErrorKind::InvalidConfig) {
                    return Err(e);
                }
                failures.push(e);
            }
        }
        let answered = servers.nodes.len() - failures.len();
        if answered < servers.quorum {
            return Err(servers.short_of_quorum("connecting", answered, failures));
        }
        for failure in &failures {
            tracing::warn!(backend = servers.backend, error = %failure, "server unreachable at connect; carrying on with a quorum");
        }
        Ok(Arc::new(servers))
    }

    /// A new waiter id, `<instance>/<n>/<owner>/<ttl ms>`. The release
    /// script routes the waiter's wake-up to this instance's channel by the
    /// first part, and hands the lock over to `<owner>` for `<ttl ms>`.
    pub(crate) fn next_waiter_id(&self, owner: &str, ttl: Duration) -> String {
        let n = self.waiter_seq.fetch_add(1, Ordering::Relaxed);
        format!("{}/{n}/{owner}/{}", self.instance, millis(ttl))
    }

    /// The addresses, for messages.
    pub(crate) fn addrs(&self) -> String {
        self.nodes
            .iter()
            .map(Node::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Acquires a lock (or an election's leadership when `value` is set),
    /// or a semaphore's or read-write lock's `access` in their spaces.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        space: Space,
        access: Access,
        name: &LockName,
        options: &AcquireOptions,
        value: Option<&[u8]>,
    ) -> Result<LockGuard> {
        if self.layout == Layout::Plain && space != Space::Lock {
            return Err(plain::lacks(match space {
                Space::Election => "elections",
                _ => "semaphores or read-write locks",
            }));
        }
        let ttl = options.effective_ttl(self.default_ttl)?;
        let request = Request {
            name,
            keys: self.keys.of(space, name),
            access,
            ttl,
            wait: options.wait,
            value,
            about: options.holder_description(self.holder.as_deref()),
        };
        let acquisition = async {
            let granted = if self.layout == Layout::Plain {
                plain::acquire(self, &request).await?
            } else if self.mode.is_one_node() {
                let fair = self.fair || request.keys.space.is_shared();
                fair_queue::acquire(self, &request, fair).await?
            } else {
                redlock::acquire(self, &request).await?
            };
            held::guard(self.clone(), &request, granted)
        };
        distlock_core::raw::observe_acquire(self.backend, name, acquisition).await
    }

    /// Owner-checked delete on every server, and (with `waiter`) removal of
    /// a queue entry. Returns whether the lock was ours on a quorum and is
    /// now deleted; `Ok(false)` means it was not ours and nothing of anyone
    /// else's was touched.
    pub(crate) async fn release(&self, keys: &LockKeys, owner: &str, waiter: &str) -> Result<bool> {
        let (script, key_list, args) = self.release_call(keys, owner, waiter);
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let what = format!("releasing {}", keys.owner);
        let results = self
            .vote(|node| node.eval(script, &key_list, &args, &what))
            .await;
        self.count_votes(results, &what)
            .map(|deleted| deleted >= self.quorum)
    }

    /// The owner-checked release of [`release`](Self::release), sent over
    /// blocking connections one server after another, with no async
    /// runtime. Best effort: errors are logged, and the TTL is the backstop.
    pub(crate) fn release_blocking(&self, keys: &LockKeys, owner: &str) {
        let (script, key_list, args) = self.release_call(keys, owner, "");
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        for node in &self.nodes {
            if let Err(e) = node.eval_blocking(script, &key_list, &args) {
                tracing::debug!(backend = self.backend, addr = node.addr(), key = %keys.owner, error = %e, "blocking release failed; the TTL will free the lock");
            }
        }
    }

    /// The release script of `keys`' primitive, with its keys and arguments.
    fn release_call<'k>(
        &self,
        keys: &'k LockKeys,
        owner: &str,
        waiter: &str,
    ) -> (&'static Script, Vec<&'k str>, Vec<Vec<u8>>) {
        if self.layout == Layout::Plain {
            let args = [owner, waiter].map(|a| a.as_bytes().to_vec());
            return (
                &SCRIPTS.plain_release,
                vec![&keys.owner, &keys.waiters],
                args.to_vec(),
            );
        }
        if keys.space.is_shared() {
            let args = [owner, waiter, &keys.wake_prefix].map(|a| a.as_bytes().to_vec());
            return (
                &SCRIPTS.shared_release,
                keys.shared_state().to_vec(),
                args.to_vec(),
            );
        }
        let redlock = self.nodes.len() > 1;
        // Elections only wake the next candidate, which writes its own
        // leader record; locks pass straight to the next waiter.
        let flags = match (keys.is_election(), redlock) {
            (false, false) => "h",
            (false, true) => "hr",
            (true, false) => "",
            (true, true) => "r",
        };
        let mut key_list = keys.release_order().to_vec();
        let mut args = vec![
            owner.as_bytes().to_vec(),
            waiter.as_bytes().to_vec(),
            self.keys.wake_prefix().into_bytes(),
            flags.as_bytes().to_vec(),
        ];
        if redlock || keys.is_election() {
            args.push(keys.released_channel.as_bytes().to_vec());
        }
        if keys.is_election() {
            key_list.push(&keys.leader);
            args.push(keys.leader_channel.as_bytes().to_vec());
        }
        (&SCRIPTS.release, key_list, args)
    }

    /// Owner-checked `PEXPIRE` on every server. `Ok` when a quorum renewed;
    /// `Err(Lost)` when too many servers no longer hold our key for a quorum
    /// to be possible, saying whether a server knew it was broken
    /// (`force_release`); `Err(Failed)` when the outcome is unknown.
    pub(crate) async fn renew(
        &self,
        name: &LockName,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
    ) -> std::result::Result<(), RenewFailure> {
        let ttl_ms = millis(ttl).to_string();
        let what = format!("renewing lock {name}");
        let (script, key_list) = if self.layout == Layout::Plain {
            (
                &SCRIPTS.plain_renew,
                vec![keys.owner.as_str(), &keys.revoked],
            )
        } else if keys.space.is_shared() {
            (
                &SCRIPTS.shared_renew,
                vec![keys.owner.as_str(), &keys.holders],
            )
        } else {
            let mut key_list = vec![keys.owner.as_str(), &keys.revoked];
            if keys.is_election() {
                key_list.push(&keys.leader);
            }
            (&SCRIPTS.renew, key_list)
        };
        let args = [owner.as_bytes(), ttl_ms.as_bytes()];
        let results = self
            .vote(|node| node.eval(script, &key_list, &args, &what))
            .await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        let revoked = results.iter().any(|r| matches!(r, Ok(2)));
        match self.count_votes(results, &what) {
            Ok(n) if n >= self.quorum => Ok(()),
            Ok(n) if revoked => Err(RenewFailure::Revoked(Error::lease_lost(format!(
                "lock {name} on {} at {}: it was broken (force_release) and is no longer ours ({n} of {answered} servers that answered still hold it, {} needed); acquire it again for a new fencing token",
                self.backend,
                self.addrs(),
                self.quorum
            )))),
            Ok(n) => Err(RenewFailure::Other(self.lease_lost(name, n, answered))),
            Err(e) => Err(RenewFailure::Other(e)),
        }
    }

    /// Runs `call` on every server as a vote: the answers until a quorum
    /// returned 1, or so many did not that it no longer can.
    pub(crate) async fn vote<F>(&self, call: impl Fn(&Node) -> F) -> Vec<Result<i64>>
    where
        F: Future<Output = Result<i64>> + Send + 'static,
    {
        let calls = self.nodes.iter().map(call).collect();
        let yes = |r: &Result<i64>| matches!(r, Ok(1));
        gather(calls, vote_decided(self.nodes.len(), self.quorum, yes)).await
    }

    /// The answers of `results` when a quorum answered, else the error of
    /// [`short_of_quorum`](Self::short_of_quorum).
    pub(crate) fn quorum_of<T>(&self, results: Vec<Result<T>>, what: &str) -> Result<Vec<T>> {
        let mut answers = Vec::new();
        let mut errors = Vec::new();
        for result in results {
            match result {
                Ok(answer) => answers.push(answer),
                Err(e) => errors.push(e),
            }
        }
        if answers.len() < self.quorum {
            return Err(self.short_of_quorum(what, answers.len(), errors));
        }
        Ok(answers)
    }

    /// The error when only `answered` servers answered and that is too few:
    /// a single server's own error as it is, else `Unavailable` naming the
    /// quorum and every failure.
    pub(crate) fn short_of_quorum(
        &self,
        what: &str,
        answered: usize,
        mut errors: Vec<Error>,
    ) -> Error {
        if self.mode.is_one_node() && !errors.is_empty() {
            return errors.remove(0);
        }
        no_quorum(
            self.backend,
            self.nodes.len(),
            self.quorum,
            what,
            answered,
            &errors,
        )
    }

    /// Counts the servers whose script returned 1. An error is returned only
    /// when the errors make the count inconclusive (the ones that answered
    /// do not decide it either way).
    fn count_votes(&self, results: Vec<Result<i64>>, what: &str) -> Result<usize> {
        let answered = results.iter().filter(|r| r.is_ok()).count();
        let mut yes = 0;
        let mut no = 0;
        let mut errors = Vec::new();
        for result in results {
            match result {
                Ok(1) => yes += 1,
                Ok(_) => no += 1,
                Err(e) => errors.push(e),
            }
        }
        let decided = yes >= self.quorum || no > self.nodes.len() - self.quorum;
        if errors.is_empty() || decided {
            return Ok(yes);
        }
        Err(self.short_of_quorum(what, answered, errors))
    }

    fn lease_lost(&self, name: &LockName, holding: usize, answered: usize) -> Error {
        Error::lease_lost(format!(
            "lock {name} on {} at {}: our key is gone or belongs to another holder ({holding} of {answered} servers that answered still hold it, {} needed); it expired or was deleted, so the lock is lost; acquire it again for a new fencing token",
            self.backend,
            self.addrs(),
            self.quorum
        ))
    }

    /// Publishes a new leader value if we still lead.
    pub(crate) async fn proclaim(
        &self,
        name: &LockName,
        keys: &LockKeys,
        owner: &str,
        value: &[u8],
        version: u64,
    ) -> Result<()> {
        let version = version.to_string();
        let what = "proclaiming a leader value";
        let args = [
            owner.as_bytes(),
            value,
            version.as_bytes(),
            keys.leader_channel.as_bytes(),
        ];
        let results = self
            .vote(|node| node.eval(&SCRIPTS.proclaim, &[&keys.owner, &keys.leader], &args, what))
            .await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        match self.count_votes(results, what)? {
            n if n >= self.quorum => Ok(()),
            n => Err(self.lease_lost(name, n, answered)),
        }
    }

    /// The current leader of an election: the record a quorum agrees on,
    /// with its newest proclaimed value.
    pub(crate) async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        if self.layout == Layout::Plain {
            return Err(plain::lacks("elections"));
        }
        let keys = self.keys.of(Space::Election, name);
        let what = format!("reading the leader of election {name}");
        type Row = Option<(String, String, Vec<u8>, String)>;
        let calls = self
            .nodes
            .iter()
            .map(|node| node.eval::<Row>(&SCRIPTS.leader, &[&keys.owner, &keys.leader], &[], &what))
            .collect();
        // Stop waiting once the answers decide it, so a silent minority
        // does not delay every read by the request timeout.
        let (servers, quorum) = (self.nodes.len(), self.quorum);
        let decided = move |answers: &[Result<Row>]| {
            let errors = answers.iter().filter(|a| a.is_err()).count();
            if errors > servers - quorum {
                return true;
            }
            if answers.len() - errors < quorum {
                return false;
            }
            let owners: Vec<&str> = answers
                .iter()
                .filter_map(|a| a.as_ref().ok()?.as_ref().map(|row| row.0.as_str()))
                .collect();
            let best = owners
                .iter()
                .map(|o| owners.iter().filter(|p| *p == o).count())
                .max()
                .unwrap_or(0);
            let unanswered = servers - answers.len();
            best >= quorum || best + unanswered < quorum
        };
        let rows = self.quorum_of(gather(calls, decided).await, &what)?;
        // A majority (a strict majority, so at most one owner qualifies)
        // must show the same owner; take its newest proclaimed value.
        let rows: Vec<_> = rows.into_iter().flatten().collect();
        let Some((owner, ..)) = rows
            .iter()
            .find(|(owner, ..)| rows.iter().filter(|r| &r.0 == owner).count() >= self.quorum)
        else {
            return Ok(None);
        };
        let same: Vec<_> = rows.iter().filter(|r| &r.0 == owner).collect();
        let version = |row: &&(String, String, Vec<u8>, String)| row.3.parse::<u64>().unwrap_or(0);
        let newest = same
            .iter()
            .copied()
            .max_by_key(version)
            .expect("a quorum is non-empty");
        let token = same
            .iter()
            .filter_map(|row| row.1.parse::<u64>().ok())
            .max()
            .ok_or_else(|| {
                Error::backend(format!(
                    "{}: the leader record of election {name} has no valid token",
                    self.backend
                ))
            })?;
        Ok(Some(LeaderInfo {
            value: newest.2.clone(),
            token: FencingToken(token),
            key: keys.owner.clone(),
        }))
    }
}

/// Why a renewal failed.
#[derive(Debug)]
pub(crate) enum RenewFailure {
    /// The lock was broken by an operator: the lease is gone.
    Revoked(Error),
    /// The lease is gone (`LeaseLost`), or the outcome is unknown.
    Other(Error),
}

/// `Unavailable`: too few servers answered for a quorum.
pub(crate) fn no_quorum(
    backend: &str,
    servers: usize,
    quorum: usize,
    what: &str,
    answered: usize,
    errors: &[Error],
) -> Error {
    let reasons = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Error::unavailable(format!(
        "{backend}: {what}: only {answered} of {servers} servers answered and {quorum} are needed; are the others running and reachable? failures: {reasons}"
    ))
}

/// Whether a lease granted by a request sent at `sent` can still be vouched
/// for: `sent + ttl - drift` is ahead. A grant that fails this is never
/// turned into a guard.
pub(crate) fn still_valid(sent: &SentAt, ttl: Duration) -> bool {
    sent.elapsed() < ttl.saturating_sub(drift_allowance(ttl))
}

/// Whole milliseconds for `PX` and script TTLs (Redis rejects `PX 0`).
pub(crate) use distlock_core::raw::lease_millis as millis;
