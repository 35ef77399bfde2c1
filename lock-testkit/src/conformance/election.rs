//! Properties of leader election.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Candidacy, DynElectionBackend, LeaderInfo, LeaderStream, Leadership, LockName,
    Result,
};
use futures::StreamExt;
use tokio::task::JoinHandle;

use super::{SLACK, Target};
use crate::assert::{joined, leader_of};

/// `n` election clients, or `None` (saying so) where the backend's
/// capabilities declare no election.
async fn election_clients(target: &dyn Target, n: usize) -> Option<Vec<Arc<DynElectionBackend>>> {
    let caps = super::capabilities_of(target).await;
    if !caps.election {
        eprintln!("{} declares no election; nothing to check", caps.backend);
        return None;
    }
    let mut clients = Vec::new();
    for _ in 0..n {
        let client = target.election_client().await;
        assert!(
            client.capabilities().election,
            "{}'s election client does not declare election",
            caps.backend
        );
        clients.push(client);
    }
    Some(clients)
}

/// `client` campaigns for `name` with `value` in a task of its own.
fn spawn_campaign(
    client: &Arc<DynElectionBackend>,
    name: &LockName,
    value: &[u8],
) -> JoinHandle<Result<Leadership>> {
    let (client, name, value) = (client.clone(), name.clone(), value.to_vec());
    tokio::spawn(async move { client.campaign(&name, Candidacy::new(value)).await })
}

/// The next leader `observed` yields, within a bound.
async fn next_leader(observed: &mut LeaderStream) -> LeaderInfo {
    crate::assert::next_ok(SLACK * 2, "observed leader", observed).await
}

/// Three candidates campaign at once; each leads in turn, never two at once,
/// and leadership tokens strictly increase.
pub async fn election_has_one_leader_at_a_time(target: &dyn Target) {
    let Some(clients) = election_clients(target, 3).await else {
        return;
    };
    let name = LockName::new("conformance/election/one").unwrap();
    let leading = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let (name, leading, tokens) = (name.clone(), leading.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let value = format!("candidate-{i}").into_bytes();
            let leadership = client
                .campaign(&name, Candidacy::new(value))
                .await
                .expect("campaign");
            assert!(!leading.swap(true, Ordering::SeqCst), "two leaders at once");
            tokens.lock().unwrap().push(leadership.token());
            let seen = leader_of(&*client, &name, "this candidate").await;
            assert_eq!(seen.token, leadership.token());
            tokio::time::sleep(Duration::from_millis(50)).await;
            leading.store(false, Ordering::SeqCst);
            leadership.resign().await.expect("resign");
        }));
    }
    super::join_within(
        Duration::from_secs(60),
        "all candidates lead in turn",
        tasks,
    )
    .await;
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// An observer sees every leader and proclaimed value, in order.
pub async fn election_observe_sees_leaders_in_order(target: &dyn Target) {
    let Some(clients) = election_clients(target, 3).await else {
        return;
    };
    let name = LockName::new("conformance/election/observe").unwrap();
    let mut observed = clients[2].observe(&name).await.expect("observe");
    let opts = AcquireOptions::new();
    let first = clients[0]
        .campaign(&name, Candidacy::new("a").with_options(opts.clone()))
        .await
        .expect("campaign a");
    let seen = next_leader(&mut observed).await;
    assert_eq!(
        (seen.value.as_slice(), seen.token),
        (&b"a"[..], first.token())
    );
    first.proclaim(b"a2".to_vec()).await.expect("proclaim");
    let seen = next_leader(&mut observed).await;
    assert_eq!(
        (seen.value.as_slice(), seen.token),
        (&b"a2"[..], first.token())
    );
    let waiting = spawn_campaign(&clients[1], &name, b"b");
    let first_token = first.token();
    first.resign().await.expect("resign");
    let seen = next_leader(&mut observed).await;
    assert_eq!(seen.value, b"b".to_vec());
    let second = joined(SLACK, "second leader", waiting)
        .await
        .expect("campaign b");
    assert_eq!(seen.token, second.token());
    assert!(second.token() > first_token);
    second.resign().await.expect("resign");
}

/// When the leader resigns, a waiting candidate takes over promptly and
/// `leader()` reports it.
pub async fn election_resign_hands_over(target: &dyn Target) {
    let Some(clients) = election_clients(target, 2).await else {
        return;
    };
    let name = LockName::new("conformance/election/resign").unwrap();
    let opts = AcquireOptions::new();
    let first = clients[0]
        .campaign(&name, Candidacy::new("first").with_options(opts.clone()))
        .await
        .expect("campaign");
    assert!(first.is_leader());
    let follower = spawn_campaign(&clients[1], &name, b"second");
    let current = leader_of(&*clients[1], &name, "the first candidate").await;
    assert_eq!(current.value, b"first".to_vec());
    let first_token = first.token();
    first.resign().await.expect("resign");
    let second = joined(SLACK, "hand-over after resign", follower)
        .await
        .expect("campaign");
    assert!(second.token() > first_token);
    let current = leader_of(&*clients[0], &name, "the second candidate").await;
    assert_eq!(
        (current.value, current.token),
        (b"second".to_vec(), second.token())
    );
    second.resign().await.expect("resign");
    let after = clients[0].leader(&name).await.expect("leader");
    assert!(
        after.is_none(),
        "no leader after the last resign, got {after:?}"
    );
}

/// Re-proclaiming the value already published yields nothing to observers:
/// after the leader proclaims `a` again and then `b`, the next thing an
/// observer sees is `b`, with the same token.
pub async fn election_reproclaiming_the_same_value_yields_nothing(target: &dyn Target) {
    let Some(clients) = election_clients(target, 2).await else {
        return;
    };
    let name = LockName::new("conformance/election/reproclaim").unwrap();
    let mut observed = clients[1].observe(&name).await.expect("observe");
    let leader = clients[0]
        .campaign(&name, Candidacy::new("a"))
        .await
        .expect("campaign");
    let seen = next_leader(&mut observed).await;
    assert_eq!((seen.value, seen.token), (b"a".to_vec(), leader.token()));
    leader
        .proclaim(b"a".to_vec())
        .await
        .expect("proclaim a again");
    leader.proclaim(b"b".to_vec()).await.expect("proclaim b");
    let seen = next_leader(&mut observed).await;
    assert_eq!(
        (seen.value_lossy(), seen.token),
        ("b".to_owned(), leader.token()),
        "re-proclaiming \"a\" must yield nothing; the next leader seen is \"b\""
    );
    leader.resign().await.expect("resign");
}

/// An observer started before anyone campaigns yields nothing, then the
/// first leader once it is elected, then the next one after a hand-over:
/// its stream neither ends nor stalls while the election is empty, and the
/// tokens it yields strictly increase.
pub async fn election_observe_outlives_an_empty_election(target: &dyn Target) {
    let Some(clients) = election_clients(target, 3).await else {
        return;
    };
    let name = LockName::new("conformance/election/empty").unwrap();
    let mut observed = clients[2].observe(&name).await.expect("observe");
    let quiet = tokio::time::timeout(Duration::from_millis(500), observed.next()).await;
    assert!(
        quiet.is_err(),
        "an empty election yielded {:?}",
        quiet.ok().flatten()
    );
    let first = clients[0]
        .campaign(&name, Candidacy::new("first"))
        .await
        .expect("campaign first");
    let seen_first = next_leader(&mut observed).await;
    assert_eq!(
        (seen_first.value.as_slice(), seen_first.token),
        (&b"first"[..], first.token())
    );
    first.resign().await.expect("resign first");
    let second = clients[1]
        .campaign(&name, Candidacy::new("second"))
        .await
        .expect("campaign second");
    let seen_second = next_leader(&mut observed).await;
    assert_eq!(
        (seen_second.value.as_slice(), seen_second.token),
        (&b"second"[..], second.token())
    );
    assert!(
        seen_second.token > seen_first.token,
        "tokens went from {} to {}",
        seen_first.token,
        seen_second.token
    );
    second.resign().await.expect("resign second");
}
