//! One workload client of the fault matrix, run as its own process by the
//! `fault-matrix` runner.
//!
//! ```text
//! fault-matrix-client --resource ADDR --url URL --client N --lock NAME --hold-ms MS --wait-ms MS
//!                     [--contend lock|rwlock-write|semaphore-1|many-names]
//!                     [--mutant no-exclusion|silent-loss|long-validity|unconfirmed-turn]
//!                     [--origin-ns NS]
//! ```
//!
//! A client built with lock-etcd's unconfirmed turn runs only as that
//! mutant, and the mutant only in such a build:
//!
//! ```text
//! DISTLOCK_MUTANT_UNCONFIRMED_TURN=1 cargo build --profile mutant -p fault-matrix --bin fault-matrix-client
//! ```

use std::process::ExitCode;
use std::time::Duration;

use fault_matrix::Contended;
use fault_matrix::client::{ClientArgs, run};
use fault_matrix::mutant::{BUILT_UNCONFIRMED, Mutant, UNCONFIRMED_TURN_BUILD};
use fault_matrix::usage::args_or_exit;

fn parse() -> Result<ClientArgs, String> {
    let mut args = std::env::args().skip(1);
    let (mut resource, mut url, mut client, mut lock) = (None, None, None, None);
    let (mut hold, mut wait) = (Duration::from_millis(5), Duration::from_secs(4));
    let mut contended = Contended::Lock;
    let mut mutant = None;
    let mut origin_ns = None;
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let millis = |v: &str| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| format!("{flag} {v:?}: {e}"))
        };
        match flag.as_str() {
            "--resource" => {
                resource = Some(
                    value
                        .parse()
                        .map_err(|e| format!("--resource {value:?}: {e}"))?,
                );
            }
            "--url" => url = Some(value),
            "--client" => client = Some(value.parse().map_err(|e| format!("--client: {e}"))?),
            "--lock" => lock = Some(value),
            "--hold-ms" => hold = millis(&value)?,
            "--wait-ms" => wait = millis(&value)?,
            "--contend" => {
                contended = Contended::parse(&value).ok_or_else(|| {
                    format!(
                        "--contend {value:?}: known: lock, rwlock-write, semaphore-1, many-names"
                    )
                })?;
            }
            "--origin-ns" => {
                origin_ns = Some(
                    value
                        .parse()
                        .map_err(|e| format!("--origin-ns {value:?}: {e}"))?,
                );
            }
            "--mutant" => {
                mutant = Some(Mutant::parse(&value).ok_or_else(|| {
                    format!(
                        "--mutant {value:?}: known: no-exclusion, silent-loss, long-validity, \
                         unconfirmed-turn"
                    )
                })?);
            }
            other => {
                return Err(format!(
                    "unknown flag {other}; known: --resource, --url, --client, --lock, \
                     --hold-ms, --wait-ms, --contend, --mutant, --origin-ns"
                ));
            }
        }
    }
    let wants_unconfirmed = mutant == Some(Mutant::UnconfirmedTurn);
    if wants_unconfirmed && !BUILT_UNCONFIRMED {
        return Err(format!(
            "--mutant unconfirmed-turn needs a client built with the defect: {UNCONFIRMED_TURN_BUILD}"
        ));
    }
    if BUILT_UNCONFIRMED && !wants_unconfirmed {
        return Err(
            "this client was built with lock-etcd's unconfirmed turn, a deliberate defect: it \
             runs only as --mutant unconfirmed-turn"
                .into(),
        );
    }
    Ok(ClientArgs {
        resource: resource.ok_or("--resource is required")?,
        url: url.ok_or("--url is required")?,
        client: client.ok_or("--client is required")?,
        lock: lock.ok_or("--lock is required")?,
        contended,
        hold,
        wait,
        mutant,
        origin_ns: origin_ns.unwrap_or_else(fault_matrix::clock::now_ns),
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = args_or_exit("fault-matrix-client", parse());
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fault-matrix-client: {e}");
            ExitCode::FAILURE
        }
    }
}
