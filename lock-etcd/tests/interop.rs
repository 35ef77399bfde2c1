//! The `concurrency` key layout against the real `etcdctl`, whose `lock`
//! and `elect` are etcd's Go `concurrency.Mutex` and `concurrency.Election`:
//! each side sees the other's holder and leader, in one queue.

mod support;

use distlock_etcd::ClientConfig;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Candidacy, ElectionBackend, ErrorKind, LockBackend, LockBackendExt, LockGuard,
    LockName, Wait,
};
use distlock_etcd::etcd_client::GetOptions;
use distlock_etcd::{EtcdBackend, EtcdConfig, lease_of_key};
use distlock_testkit::assert::{acquired_and_released, joined, leader_of, next_ok, spawn_acquire};
use distlock_testkit::servers::etcd::EtcdUser;
use distlock_testkit::servers::{EtcdCluster, EtcdOptions};
use support::etcdctl::{BOUND, Etcdctl, Running};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// How long a peer that must stay out is watched for not getting in.
const QUIET: Duration = Duration::from_millis(500);

/// A shell command for `etcdctl lock NAME -- …`: says `held <its pid>`,
/// then waits until sent SIGTERM; gives up (exit 3) after about 20 s, so
/// a failed test leaves no shell behind.
const HOLD: &str = r#"echo "held $$"; trap 'exit 0' TERM; i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 3"#;

async fn concurrency_backend(cluster: &EtcdCluster) -> EtcdBackend {
    EtcdBackend::connect(support::concurrency_config_for(cluster.endpoints()))
        .await
        .expect("connect in the concurrency layout")
}

/// The keys under `prefix`, oldest first: `(key, create_revision, value)`.
async fn queue(cluster: &EtcdCluster, prefix: &str) -> Vec<(String, i64, Vec<u8>)> {
    let resp = support::raw_client(cluster)
        .await
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the queue");
    let mut keys: Vec<_> = resp
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
                kv.value().to_vec(),
            )
        })
        .collect();
    keys.sort_by_key(|k| k.1);
    keys
}

/// Polls until `prefix` holds `count` keys, within [`BOUND`].
async fn until_queued(cluster: &EtcdCluster, prefix: &str, count: usize) {
    let start = Instant::now();
    loop {
        let keys = queue(cluster, prefix).await;
        if keys.len() == count {
            return;
        }
        assert!(
            start.elapsed() < BOUND,
            "{prefix} holds {keys:?}, not {count} keys"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// What every etcdctl test stands on: one etcd, etcdctl for it, and a
/// backend in the `concurrency` layout.
struct Interop {
    cluster: EtcdCluster,
    etcdctl: Etcdctl,
    backend: EtcdBackend,
}

impl Interop {
    async fn start() -> Self {
        let cluster = support::start_cluster(1).await;
        let etcdctl = Etcdctl::for_cluster(&cluster);
        let backend = concurrency_backend(&cluster).await;
        Interop {
            cluster,
            etcdctl,
            backend,
        }
    }

    /// `etcdctl lock name -- HOLD`, once it holds.
    async fn etcdctl_holding(&self, name: &str) -> Holding {
        let mut etcdctl = self.etcdctl.spawn(&["lock", name, "--", "sh", "-c", HOLD]);
        let line = etcdctl.line().await;
        let shell = line
            .strip_prefix("held ")
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("unexpected output {line:?}"));
        Holding { etcdctl, shell }
    }

    /// The backend waiting up to [`BOUND`] for `name` in a spawned task,
    /// described by `options`.
    fn waiter(
        &self,
        name: &str,
        options: AcquireOptions,
    ) -> JoinHandle<distlock_core::Result<LockGuard>> {
        let name = LockName::new(name).unwrap();
        spawn_acquire(
            self.backend.clone(),
            &name,
            options.wait(Wait::Timeout(BOUND)),
        )
    }
}

/// An `etcdctl lock` running [`HOLD`]: the process and the pid of its shell.
struct Holding {
    etcdctl: Running,
    shell: u32,
}

impl Holding {
    /// Ends the shell, so that etcdctl unlocks and exits with success.
    async fn stop(mut self) {
        Running::signal_pid(self.shell, "TERM").await;
        assert!(self.etcdctl.exit().await.success());
    }
}

#[tokio::test]
async fn a_lock_etcdctl_holds_blocks_distlock_until_etcdctl_exits() {
    let interop = Interop::start().await;
    let (cluster, backend) = (&interop.cluster, &interop.backend);
    let name = "/interop/jobs";

    let holder = interop.etcdctl_holding(name).await;
    let keys = queue(cluster, "/interop/jobs/").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let (go_key, go_rev, go_value) = keys[0].clone();
    assert!(lease_of_key(&go_key).is_some(), "{go_key}");
    assert!(go_value.is_empty());

    let err = backend.try_lock(name).await.expect_err("etcdctl holds it");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert!(err.message().contains(&go_key), "{err}");

    let waiter = interop.waiter(name, AcquireOptions::new());
    until_queued(cluster, "/interop/jobs/", 2).await;
    assert!(!waiter.is_finished(), "distlock got in while etcdctl holds");

    holder.stop().await;
    let guard = joined(BOUND, "distlock gets the lock after etcdctl", waiter)
        .await
        .expect("acquire");
    assert!(
        guard.token().get() > u64::try_from(go_rev).unwrap(),
        "token {} is not after etcdctl's create revision {go_rev}",
        guard.token().get()
    );
    assert!(guard.key().starts_with("/interop/jobs/"), "{}", guard.key());
    assert!(lease_of_key(guard.key()).is_some(), "{}", guard.key());
    guard.release().await.expect("release");
}

#[tokio::test]
async fn etcdctl_lock_waits_for_distlock_to_release() {
    let t = Interop::start().await;

    let guard = t.backend.lock("interop").await.expect("lock");
    // Without a command, etcdctl prints its key once it holds the lock.
    let mut peer = t.etcdctl.spawn(&["lock", "interop"]);
    until_queued(&t.cluster, "interop/", 2).await;
    peer.prints_nothing_for(QUIET).await;

    let token = guard.token().get();
    guard.release().await.expect("release");
    let key = peer.line().await;
    let keys = queue(&t.cluster, "interop/").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].0, key);
    assert!(u64::try_from(keys[0].1).unwrap() > token);

    assert!(peer.interrupt().await.success());
    acquired_and_released("etcdctl unlocked on exit", t.backend.try_lock("interop")).await;
}

#[tokio::test]
async fn inspect_and_list_show_an_etcdctl_holder_without_a_description() {
    let interop = Interop::start().await;
    let (cluster, backend) = (&interop.cluster, &interop.backend);
    let name = LockName::new("/interop/ops").unwrap();
    let holder = interop.etcdctl_holding(name.as_str()).await;
    let (go_key, go_rev, _) = queue(cluster, "/interop/ops/").await.remove(0);
    let waiter = interop.waiter(
        name.as_str(),
        AcquireOptions::new().holder("distlock-waiter"),
    );
    until_queued(cluster, "/interop/ops/", 2).await;

    let status = backend.inspect(&name).await.expect("inspect");
    let shown = status.holder.as_ref().expect("etcdctl holds it");
    assert_eq!(shown.key, go_key);
    assert_eq!(shown.token.get(), u64::try_from(go_rev).unwrap());
    assert_eq!(shown.description, None, "etcdctl stores no description");
    // `etcdctl lock` keeps a session lease of `--ttl` 10 s alive.
    let left = shown.lease_left.expect("lease left");
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(10),
        "{left:?}"
    );
    assert_eq!(status.waiting, 1, "{status:?}");
    assert_eq!(
        status.waiters[0].description.as_deref(),
        Some("distlock-waiter")
    );
    let listed = backend.list_all("/interop/").await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, name);
    assert_eq!(listed[0].holder_token, Some(shown.token));
    assert_eq!(listed[0].waiting, 1);

    holder.stop().await;
    let guard = joined(BOUND, "distlock gets the lock after etcdctl", waiter)
        .await
        .expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_name_ending_in_slash_is_the_same_lock_as_in_etcdctl() {
    // Go's `NewMutex(s, "jobs/")` writes `jobs//<lease>`; so does distlock.
    let interop = Interop::start().await;
    let backend = &interop.backend;
    let holder = interop.etcdctl_holding("jobs/").await;
    let err = backend
        .try_lock("jobs/")
        .await
        .expect_err("etcdctl holds it");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    assert!(err.message().contains("jobs//"), "{err}");
    holder.stop().await;
    let guard = backend.try_lock("jobs/").await.expect("free again");
    assert!(guard.key().starts_with("jobs//"), "{}", guard.key());
    guard.release().await.expect("release");
}

#[tokio::test]
async fn elections_are_shared_with_etcdctl_elect_both_ways() {
    let t = Interop::start().await;
    let election = LockName::new("interop-election").unwrap();

    // etcdctl leads: prints its key, then its proposal.
    let mut candidate = t
        .etcdctl
        .spawn(&["elect", "interop-election", "go-proposal"]);
    let go_key = candidate.line().await;
    assert_eq!(candidate.line().await, "go-proposal");
    let leader = leader_of(&t.backend, &election, "etcdctl").await;
    assert_eq!(leader.value, b"go-proposal");
    assert_eq!(leader.key, go_key);
    let mut observed = t.backend.observe(&election).await.expect("observe");
    let first = next_ok(BOUND, "observe yields the leader", &mut observed).await;
    assert_eq!(first.value, b"go-proposal");

    // distlock campaigns behind etcdctl and leads once it resigns.
    let campaign = tokio::spawn({
        let (backend, election) = (t.backend.clone(), election.clone());
        async move {
            let options = AcquireOptions::new().wait(Wait::Timeout(BOUND));
            backend
                .campaign(
                    &election,
                    Candidacy::new("distlock-value").with_options(options.clone()),
                )
                .await
        }
    });
    until_queued(&t.cluster, "interop-election/", 2).await;
    assert!(!campaign.is_finished(), "distlock leads beside etcdctl");
    assert!(candidate.interrupt().await.success());
    let leadership = joined(BOUND, "distlock is elected after etcdctl resigns", campaign)
        .await
        .expect("campaign");
    assert!(leadership.token() > leader.token);
    let next = next_ok(BOUND, "observe yields the new leader", &mut observed).await;
    assert_eq!(next.value, b"distlock-value");

    // etcdctl's observer sees distlock's value, and a proclaimed one.
    let mut listener = t.etcdctl.spawn(&["elect", "-l", "interop-election"]);
    assert_eq!(listener.line().await, leadership.key());
    assert_eq!(listener.line().await, "distlock-value");
    leadership.proclaim(b"proclaimed").await.expect("proclaim");
    assert_eq!(listener.line().await, leadership.key());
    assert_eq!(listener.line().await, "proclaimed");
    let values = queue(&t.cluster, "interop-election/").await;
    assert_eq!(values.len(), 1, "{values:?}");
    assert_eq!(values[0].2, b"proclaimed");
    assert!(listener.interrupt().await.success());
    leadership.resign().await.expect("resign");
}

#[tokio::test]
async fn a_lock_and_an_election_of_one_name_share_a_queue() {
    let cluster = support::start_cluster(1).await;
    let backend = concurrency_backend(&cluster).await;
    let guard = backend.lock("shared").await.expect("lock");
    let shared = LockName::new("shared").unwrap();
    let leader = leader_of(&backend, &shared, "the lock holder, as in Go").await;
    assert_eq!(leader.key, guard.key());
    // A lock's value is its holder's description, which Go never reads.
    assert_eq!(
        leader.value,
        distlock_core::default_holder_description().as_bytes()
    );
    guard.release().await.expect("release");
}

#[tokio::test]
async fn bad_layout_prefix_and_names_are_refused_before_any_io() {
    let err = EtcdConfig::from_url("etcd://127.0.0.1:1?layout=curator").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        err.message().contains("known: distlock, concurrency"),
        "{err}"
    );
    let err = EtcdConfig::from_url("etcd://127.0.0.1:1/app?layout=concurrency").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("layout=concurrency"), "{err}");
    let err = EtcdBackend::connect(
        support::concurrency_config_for(vec!["127.0.0.1:1".into()]).with_prefix("/app"),
    )
    .await
    .expect_err("a prefix with layout=concurrency");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");

    // Names: the general rules hold in this layout too, and are checked
    // without a request: the server is gone.
    let cluster = support::start_cluster(1).await;
    let backend = concurrency_backend(&cluster).await;
    cluster.member(0).kill().await;
    for bad in ["", "nul\0name", "line\nbreak", &"x".repeat(513)] {
        let started = Instant::now();
        let err = backend.try_lock(bad).await.expect_err("bad name");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}: {err}");
        assert!(started.elapsed() < Duration::from_millis(100), "{bad:?}");
    }
}

#[tokio::test]
async fn a_user_granted_only_its_lock_names_connects_in_the_concurrency_layout() {
    let user = EtcdUser::new("mutex", "mutex-secret", "granted/");
    let options = EtcdOptions::new(1).auth("root-secret", vec![user]);
    let cluster = EtcdCluster::start_with(options)
        .await
        .unwrap_or_else(|e| panic!("could not start etcd with auth: {e}"));
    let config = support::concurrency_config_for(cluster.endpoints())
        .with_credentials("mutex", "mutex-secret");
    let backend = EtcdBackend::connect(config)
        .await
        .expect("connects although no fixed range is granted");
    acquired_and_released("lock a granted name", backend.lock("granted")).await;
    let err = backend.try_lock("other").await.expect_err("not granted");
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
}
