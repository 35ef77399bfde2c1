//! Running cells: servers per row, a checking resource, fault proxies and
//! client processes per cell, the fault, and the measurement.

use std::fs::File;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::process::{Child, Command};

use super::cell::Cell;
use super::clock::now_ns;
use super::contended::Contended;
use super::faults::Fault;
use super::inject::Target;
use super::resource::CheckingResource;
use super::row::{Row, Service};
use lock_testkit::proxy::FaultProxy;

/// How long the clients have to start and get going.
const WARM_UP: Duration = Duration::from_secs(30);

/// How a run is shaped.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The `fault-matrix-client` binary.
    pub client_bin: PathBuf,
    /// Client processes per cell (at least 4).
    pub clients: u32,
    /// Lease TTL (ZooKeeper: session timeout).
    pub ttl: Duration,
    /// How long an ordinary critical section lasts.
    pub hold: Duration,
    /// Contention before the fault.
    pub before: Duration,
    /// Measurement after the heal; stuck clients are judged over it.
    pub after: Duration,
    /// How long a pause, partition, freeze or cut-off lasts (past the TTL).
    pub span: Duration,
    /// What the clients contend on.
    pub contended: Contended,
}

impl Plan {
    /// The full matrix: a TTL of 1 s, and 5×TTL after each heal.
    pub fn full(client_bin: PathBuf) -> Plan {
        let ttl = Duration::from_secs(1);
        Plan {
            client_bin,
            clients: 4,
            ttl,
            hold: Duration::from_millis(5),
            before: Duration::from_secs(1),
            after: 5 * ttl + Duration::from_millis(500),
            span: 3 * ttl,
            contended: Contended::Lock,
        }
    }

    /// The quick matrix for CI: the same TTL, shorter windows.
    pub fn quick(client_bin: PathBuf) -> Plan {
        let ttl = Duration::from_secs(1);
        Plan {
            before: Duration::from_millis(300),
            after: Duration::from_secs(2),
            span: 2 * ttl,
            ..Plan::full(client_bin)
        }
    }
}

/// Runs `faults` on `row`, starting its servers once (and again if a cell
/// left them broken). Inapplicable cells come back as such.
///
/// # Cancel safety
///
/// Cancel safe: dropping the future kills the cell's clients and servers.
pub async fn run_row(row: Row, faults: &[Fault], plan: &Plan, logs: &TempDir) -> Vec<Cell> {
    let inapplicable = |f: Fault| f.inapplicable(row).or(plan.contended.inapplicable(f, row));
    let empty = |fault, status, why| {
        let mut cell = Cell::empty(row, fault, status, why);
        cell.backend = plan.contended.label(row);
        cell
    };
    let applicable: Vec<Fault> = faults
        .iter()
        .copied()
        .filter(|&f| inapplicable(f).is_none())
        .collect();
    let isolatable = applicable.contains(&Fault::IsolateFollower);
    let mut service = if applicable.is_empty() {
        None
    } else {
        match Service::start(row, isolatable).await {
            Ok(service) => Some(service),
            Err(e) => {
                return faults
                    .iter()
                    .map(|&f| match inapplicable(f) {
                        Some(why) => empty(f, "inapplicable", Some(why.into())),
                        None => empty(f, "failed", Some(format!("servers: {e}"))),
                    })
                    .collect();
            }
        }
    };
    let mut cells = Vec::new();
    for (n, &fault) in faults.iter().enumerate() {
        if let Some(why) = inapplicable(fault) {
            cells.push(empty(fault, "inapplicable", Some(why.into())));
            continue;
        }
        if service.is_none() {
            service = Service::start(row, isolatable).await.ok();
        }
        let Some(svc) = service.as_ref() else {
            cells.push(empty(
                fault,
                "failed",
                Some("servers did not restart".into()),
            ));
            continue;
        };
        let lock = format!("fault-matrix/{}-{}-{n}", row.id(), fault.id());
        let cell = match run_cell(svc, row, fault, plan, &lock, logs).await {
            Ok(mut cell) => {
                cell.backend = plan.contended.label(row);
                cell
            }
            Err(e) => {
                // Whatever state the fault left, start afresh next time.
                service = None;
                empty(fault, "failed", Some(e))
            }
        };
        eprintln!("{}", super::report::line(&cell));
        cells.push(cell);
    }
    cells
}

/// A client process; killed when dropped.
#[derive(Debug)]
struct ClientProcess {
    child: Child,
    pid: u32,
    log: PathBuf,
}

impl ClientProcess {
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }
}

/// Runs one cell on a running service.
///
/// # Cancel safety
///
/// Cancelling kills the clients; the service may be left mid-fault.
pub async fn run_cell(
    service: &Service,
    row: Row,
    fault: Fault,
    plan: &Plan,
    lock: &str,
    logs: &TempDir,
) -> Result<Cell, String> {
    let resource = CheckingResource::start()
        .await
        .map_err(|e| format!("checking resource: {e}"))?;
    let addrs = service.proxied_addrs();
    let follower = if fault == Fault::IsolateFollower {
        Some(follower_of(service).await?)
    } else {
        None
    };
    let mut proxies = Vec::new();
    let mut clients = Vec::new();
    for client in 0..plan.clients {
        let mut own = Vec::new();
        for (member, addr) in addrs.iter().enumerate() {
            // Under fault 8, even clients reach only the follower that is
            // cut off, odd ones only the other members.
            if let Some(f) = follower
                && ((client % 2 == 0) != (member == f))
            {
                continue;
            }
            own.push(
                FaultProxy::start(*addr)
                    .await
                    .map_err(|e| format!("fault proxy: {e}"))?,
            );
        }
        let url = service.url(&own.iter().collect::<Vec<_>>(), plan.ttl);
        clients.push(spawn_client(plan, &resource, &url, client, lock, logs)?);
        proxies.push(own);
    }
    let pids: Vec<u32> = clients.iter().map(|c| c.pid).collect();

    let warm = tokio::time::Instant::now() + WARM_UP;
    while resource.acquisitions() < plan.clients as usize {
        if tokio::time::Instant::now() > warm {
            let tails: Vec<String> = clients.iter().map(ClientProcess::tail).collect();
            return Err(format!(
                "only {} acquisitions within {WARM_UP:?}; client logs: {}",
                resource.acquisitions(),
                tails.join(" | ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let began = now_ns();
    tokio::time::sleep(plan.before).await;
    let target = Target {
        service,
        resource: &resource,
        pids: &pids,
        proxies: &proxies,
        ttl: plan.ttl,
        span: plan.span,
        hold: plan.hold,
        lock,
        follower,
    };
    let outcome = target.run(fault).await;
    if let Ok(t) = &outcome {
        let resume_at = t.resume_ns();
        let wait = plan
            .after
            .saturating_sub(Duration::from_nanos(now_ns().saturating_sub(resume_at)));
        tokio::time::sleep(wait).await;
    }
    let ended = now_ns();
    let record = resource.record();
    for client in &mut clients {
        let _ = kill(Pid::from_raw(client.pid as i32), Signal::SIGCONT);
        let _ = client.child.kill().await;
    }
    let timeline = outcome?;
    let mut cell = Cell::measure(
        row,
        fault,
        plan.ttl,
        plan.clients,
        began,
        ended,
        &record,
        &timeline,
    );
    if record.protocol_errors > 0 {
        cell.notes.push(format!(
            "{} unreadable client messages",
            record.protocol_errors
        ));
    }
    Ok(cell)
}

fn spawn_client(
    plan: &Plan,
    resource: &CheckingResource,
    url: &str,
    client: u32,
    lock: &str,
    logs: &TempDir,
) -> Result<ClientProcess, String> {
    let log = logs
        .path()
        .join(format!("client-{}-{client}.log", now_ns()));
    let file = File::create(&log).map_err(|e| format!("client log: {e}"))?;
    let child = Command::new(&plan.client_bin)
        .arg("--resource")
        .arg(resource.addr().to_string())
        .arg("--url")
        .arg(url)
        .arg("--client")
        .arg(client.to_string())
        .arg("--lock")
        .arg(lock)
        .arg("--contend")
        .arg(plan.contended.id())
        .arg("--hold-ms")
        .arg(plan.hold.as_millis().to_string())
        .arg("--wait-ms")
        .arg((4 * plan.ttl).as_millis().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start {}: {e}", plan.client_bin.display()))?;
    let pid = child.id().ok_or("the client exited at once")?;
    Ok(ClientProcess { child, pid, log })
}

/// A member that is not the leader.
async fn follower_of(service: &Service) -> Result<usize, String> {
    let leader = service
        .leader_index()
        .await
        .ok_or("no leader to pick a follower of")?;
    Ok((leader + 1) % service.members())
}
