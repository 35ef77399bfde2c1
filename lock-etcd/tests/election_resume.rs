//! Observers resume correctly when their watch breaks and the history they
//! missed has been compacted (`ErrCompacted`): no leader twice, none out of
//! order, and they catch up with the current leader.

mod support;

use std::time::Duration;

use distlock_core::{Candidacy, ElectionBackend, LockName};
use futures::StreamExt;
use tokio::time::timeout;

const SLACK: Duration = Duration::from_secs(6);

#[tokio::test]
async fn observe_resumes_after_a_break_and_compaction() {
    let cluster = support::start_cluster(1).await;
    let (proxy, observer) = support::behind_proxy(&cluster, support::config_for).await;
    let (a, b) = support::two_backends(&cluster).await;
    let name = LockName::new("resume/election").unwrap();
    let mut stream = observer.observe(&name).await.expect("observe");
    let mut seen = Vec::new();
    let mut next = async || loop {
        let item = timeout(SLACK, stream.next())
            .await
            .expect("observer fell silent")
            .expect("stream ended");
        match item {
            Ok(info) => return info,
            Err(e) => assert!(e.is_retryable(), "observer error: {e}"),
        }
    };

    let first = a
        .campaign(&name, Candidacy::new("a1"))
        .await
        .expect("campaign a");
    seen.push(next().await);

    // Cut the observer off, change leaders and values, and compact the
    // history it missed.
    proxy.cut();
    first.proclaim(b"a2".to_vec()).await.expect("proclaim");
    let waiting = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.campaign(&name, Candidacy::new("b1")).await })
    };
    first.resign().await.expect("resign");
    let second = timeout(SLACK, waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("campaign b");
    second.proclaim(b"b2".to_vec()).await.expect("proclaim b2");
    let mut raw = support::raw_client(&cluster).await;
    let now = support::revision(&mut raw).await;
    raw.compact(now, None).await.expect("compact");
    proxy.restore();

    loop {
        let info = next().await;
        seen.push(info.clone());
        if info.value == b"b2" {
            break;
        }
    }
    let order: Vec<_> = seen.iter().map(|i| (i.token, i.value_lossy())).collect();
    assert!(
        seen.windows(2)
            .all(|w| w[0].token <= w[1].token && w[0] != w[1]),
        "leaders out of order or repeated: {order:?}"
    );
    assert_eq!(seen[0].value, b"a1");
    assert_eq!(seen.last().unwrap().token, second.token());
    second.resign().await.expect("resign");
}
