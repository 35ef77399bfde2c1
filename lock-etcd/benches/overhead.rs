//! Uncontended overhead: one client's `lock` + `release` of a free lock
//! against the raw round trips of the same requests, issued with
//! `etcd-client` directly, on the same single-member etcd in the same run.
//!
//! With a pooled lease (every cycle after the first), our acquire of a free
//! lock is one Txn (`If(CreateRevision(key) == 0) Then(Put(key, value,
//! lease), Get(queue, newest two by create revision)) Else(Get(key),
//! Get(queue, oldest))`) and our release one Txn (`If(CreateRevision(key)
//! == rev) Then(Delete(key))`). The raw loop grants one lease up front,
//! keeps it alive, and sends those two Txns in a loop.
//!
//! Run: `cargo bench -p distlock-etcd --bench overhead` (`BENCH_ROUNDS`,
//! default 8, alternating rounds; `BENCH_SECS`, default 1, seconds per
//! side per round).

use async_trait::async_trait;
use distlock_etcd::ClientConfig;
use distlock_etcd::{DEFAULT_REQUEST_TIMEOUT, DEFAULT_TTL, EtcdBackend, EtcdConfig};
use distlock_testkit::overhead::{Cycle, Ours, Rounds, compare, print};
use distlock_testkit::servers::EtcdCluster;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KvClient, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::timeout;

const NAME: &str = "overhead";

/// The two Txns of an uncontended cycle, on one lease granted up front.
struct Raw {
    kv: KvClient,
    queue: String,
    key: String,
    value: Vec<u8>,
    lease: i64,
    /// Our key's create revision once acquired.
    rev: i64,
    keepalive: tokio::task::JoinHandle<()>,
}

impl Raw {
    async fn connect(endpoints: &[String]) -> Raw {
        let client = Client::connect(endpoints, None).await.expect("connect");
        let secs = DEFAULT_TTL.as_secs().max(1) as i64;
        let lease = timeout(
            DEFAULT_REQUEST_TIMEOUT,
            client.lease_client().grant(secs, None),
        )
        .await
        .expect("lease grant timed out")
        .expect("lease grant")
        .id();
        let (mut keeper, mut stream) = client
            .lease_client()
            .keep_alive(lease)
            .await
            .expect("keepalive");
        let period = DEFAULT_TTL / 3;
        let keepalive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let round_trip = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                if !matches!(timeout(period, round_trip).await, Ok(Ok(Some(_)))) {
                    return;
                }
            }
        });
        let queue = format!("/bench-raw/lock/{NAME}/");
        Raw {
            kv: client.kv_client(),
            key: format!("{queue}{lease:x}"),
            queue,
            value: distlock_core::default_holder_description().into_bytes(),
            lease,
            rev: 0,
            keepalive,
        }
    }

    async fn txn(&mut self, txn: Txn) -> Result<TxnResponse, String> {
        match timeout(DEFAULT_REQUEST_TIMEOUT, self.kv.txn(txn)).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err("timed out".to_owned()),
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}

#[async_trait]
impl Cycle for Raw {
    async fn acquire(&mut self) -> Result<(), String> {
        let newest_two = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2);
        let oldest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(
                    self.key.clone(),
                    self.value.clone(),
                    Some(PutOptions::new().with_lease(self.lease)),
                ),
                TxnOp::get(self.queue.clone(), Some(newest_two)),
            ])
            .or_else([
                TxnOp::get(self.key.clone(), None),
                TxnOp::get(self.queue.clone(), Some(oldest)),
            ]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err("our key was already there".to_owned());
        }
        let rev = resp.header().map_or(0, |h| h.revision());
        let ahead = match resp.op_responses().get(1) {
            Some(TxnOpResponse::Get(get)) => get
                .kvs()
                .iter()
                .filter(|kv| kv.create_revision() < rev)
                .count(),
            _ => return Err("no queue read in the answer".to_owned()),
        };
        if ahead > 0 {
            return Err("the lock was not free".to_owned());
        }
        self.rev = rev;
        Ok(())
    }

    async fn release(&mut self) -> Result<(), String> {
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                self.rev,
            )])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
        if self.txn(txn).await?.succeeded() {
            Ok(())
        } else {
            Err("our key was gone".to_owned())
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = Rounds::from_env();
    let cluster = EtcdCluster::start(1)
        .await
        .unwrap_or_else(|e| panic!("could not start etcd: {e}"));
    let endpoints = cluster.endpoints();
    let config = EtcdConfig::new(endpoints.clone()).with_prefix("/bench-ours");
    let backend = EtcdBackend::connect(config).await.expect("connect");
    let mut ours = Ours::new(backend, NAME);
    let mut raw = Raw::connect(&endpoints).await;
    println!(
        "# distlock-etcd: uncontended lock + release against the raw Txns\n\n\
         etcd at {endpoints:?}; 1 client, hold 0, {} alternating rounds of {:?} per side\n",
        rounds.rounds, rounds.each
    );
    let (o, r) = compare(&mut ours, &mut raw, rounds).await;
    print(
        ["distlock etcd (lock + release)", "raw etcd-client (2 Txns)"],
        [&o, &r],
    );
}
