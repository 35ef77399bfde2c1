//! Running cells: servers per row, then per trial a checking resource,
//! fault proxies and client processes, the fault, and the measurement.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::process::{Child, Command};

use super::cell::{Cell, Hold};
use super::clock::now_ns;
use super::contended::Contended;
use super::faults::Fault;
use super::history;
use super::history_file::{self, HistoryFile};
use super::inject::Target;
use super::mutant::{Mutant, UNCONFIRMED_TURN_BUILD};
use super::resource::{CheckingResource, Record};
use super::row::{Row, Servers, Service};
use super::second::{self, Second};
use super::shape::{Shape, cell_seed, trial_seed};
use super::timeline;
use super::verdict::{Trial, merge};
use distlock_testkit::history::{Mode, Verdict};
use distlock_testkit::proxy::FaultProxy;

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
    /// Least contention before the fault; a trial draws up to twice it.
    pub before: Duration,
    /// Measurement after the heal, at most; stuck clients are judged over
    /// it. Under a fault it ends early, once every living client has been
    /// granted the lock again and [`Plan::least_after`] has passed; with no
    /// fault it is measured whole.
    pub after: Duration,
    /// How long a fault lasts whose length a trial does not draw (slow
    /// network: this plus 2×TTL).
    pub span: Duration,
    /// What the clients contend on.
    pub contended: Contended,
    /// The run's seed: every trial's shape follows from it.
    pub seed: u64,
    /// Trials per cell whose verdict can flip (pause, partition, freeze,
    /// cut-off and leader failover on strong-token backends).
    pub flip_trials: u32,
    /// Trials per other cell.
    pub trials: u32,
    /// Where every trial's history is written (`--histories`); `None`
    /// writes only the histories the two checkers disagree on, into the
    /// temporary directory.
    pub histories: Option<PathBuf>,
}

impl Plan {
    /// The full matrix: a TTL of 1 s; 20 trials of each cell whose verdict
    /// can flip, 5 of the others.
    pub fn full(client_bin: PathBuf) -> Plan {
        let ttl = Duration::from_secs(1);
        Plan {
            client_bin,
            clients: 4,
            ttl,
            hold: Duration::from_millis(5),
            before: Duration::from_millis(200),
            after: ttl + ttl / 2,
            span: ttl,
            contended: Contended::Lock,
            seed: 0,
            flip_trials: 20,
            trials: 5,
            histories: None,
        }
    }

    /// The quick matrix for CI: the same TTL and windows, fewer trials.
    pub fn quick(client_bin: PathBuf) -> Plan {
        Plan {
            flip_trials: 3,
            trials: 1,
            ..Plan::full(client_bin)
        }
    }

    /// Every cell runs `n` trials.
    pub fn with_trials(mut self, n: u32) -> Plan {
        self.flip_trials = n;
        self.trials = n;
        self
    }

    /// How many trials `row` × `fault` runs.
    /// The many trials of a cell whose verdict can flip go to the lock;
    /// the other primitives' rows run the ordinary count.
    pub fn trials_of(&self, row: Row, fault: Fault) -> u32 {
        if can_flip(row, fault) && self.contended == Contended::Lock {
            self.flip_trials
        } else {
            self.trials
        }
    }

    /// The client binary of `mutant`'s rows: the one built with lock-etcd's
    /// unconfirmed turn for that mutant (in the target directory's
    /// `mutant` profile, beside `debug`), else [`Plan::client_bin`].
    pub fn client_bin_for(&self, mutant: Option<Mutant>) -> Result<PathBuf, String> {
        if mutant != Some(Mutant::UnconfirmedTurn) {
            return Ok(self.client_bin.clone());
        }
        let name = self.client_bin.file_name().ok_or("no client binary name")?;
        let profiles = self
            .client_bin
            .parent()
            .and_then(|debug| debug.parent())
            .ok_or("the client binary is not in a target directory")?;
        let bin = profiles.join("mutant").join(name);
        if bin.exists() {
            Ok(bin)
        } else {
            Err(format!(
                "{} is missing; build it with {UNCONFIRMED_TURN_BUILD}",
                bin.display()
            ))
        }
    }

    /// The least measurement after the heal of a fault: half a TTL.
    pub fn least_after(&self) -> Duration {
        self.ttl / 2
    }

    /// How long an acquisition may wait.
    fn wait(&self) -> Duration {
        2 * self.ttl
    }

    /// How long a client may stay silent before it counts as hung: an
    /// acquisition's wait and two TTLs.
    fn silence(&self) -> Duration {
        self.wait() + 2 * self.ttl
    }
}

/// How many trials `row` runs under `faults`: the applicable cells' trials.
pub fn planned_trials(row: Row, faults: &[Fault], plan: &Plan) -> u32 {
    faults
        .iter()
        .filter(|&&f| {
            f.inapplicable(row)
                .or(plan.contended.inapplicable(f, row))
                .is_none()
        })
        .map(|&f| plan.trials_of(row, f))
        .sum()
}

/// Whether a cell's verdict can differ between trials: the faults whose
/// outcome depends on timing, on backends whose verdicts are strict. A
/// paused waiter is one: whether a grant reaches it while it is stopped,
/// and what it reads first when it resumes, are races.
pub fn can_flip(row: Row, fault: Fault) -> bool {
    row.strong_tokens()
        && matches!(
            fault,
            Fault::PauseHolder
                | Fault::PartitionHolder
                | Fault::KillLeader
                | Fault::FreezeMember
                | Fault::IsolateFollower
                | Fault::PauseServer
                | Fault::PauseWaiter
                | Fault::StaleTurn
        )
}

/// How a cluster's members elect a leader under fault 14: slowly, so
/// that a member cut off from its peers goes on answering its clients as
/// if it still had a leader long enough for a waiter to read its turn
/// there (a member that knows it has none refuses clients that require a
/// leader, as distlock's do, and the fault could show nothing).
const STALE_TURN_ELECTION: Duration = Duration::from_secs(2);

/// How a row's servers are started for `fault`: able to cut a member off
/// when some fault of the row needs it (`isolatable`), and for fault 14
/// always, with slow elections.
fn servers_of(fault: Fault, isolatable: bool) -> Servers {
    match fault {
        Fault::StaleTurn => Servers {
            isolatable: true,
            election_timeout: Some(STALE_TURN_ELECTION),
        },
        _ => Servers {
            isolatable,
            election_timeout: None,
        },
    }
}

/// Runs `faults` on `row`, starting its servers once (and again if a trial
/// left them broken), each cell for its trials. Inapplicable cells come
/// back as such.
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
    // Fault 14 needs servers of its own: see `servers_of`.
    let servers_for = |fault| servers_of(fault, isolatable);
    let mut servers = applicable.first().map(|&f| servers_for(f));
    let mut service = if let Some(options) = servers {
        match Service::start(row, options).await {
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
    } else {
        None
    };
    let mut cells = Vec::new();
    for (n, &fault) in faults.iter().enumerate() {
        if let Some(why) = inapplicable(fault) {
            cells.push(empty(fault, "inapplicable", Some(why.into())));
            continue;
        }
        let seed = cell_seed(plan.seed, row, plan.contended, fault);
        let mut trials = Vec::new();
        if servers != Some(servers_for(fault)) {
            servers = Some(servers_for(fault));
            service = None;
        }
        for index in 0..plan.trials_of(row, fault) {
            let seed = trial_seed(seed, index);
            if service.is_none() {
                service = Service::start(row, servers_for(fault)).await.ok();
            }
            let Some(svc) = service.as_ref() else {
                trials.push(Trial {
                    index,
                    seed,
                    outcome: Err("servers did not restart".into()),
                    revoked_early: Vec::new(),
                });
                continue;
            };
            let lock = format!("fault-matrix/{}-{}-{n}-{index}", row.id(), fault.id());
            let shape = Shape::draw(seed, fault, plan.clients, plan.ttl, plan.before, plan.span);
            let trial = run_trial(svc, row, fault, plan, &shape, &lock, logs).await;
            if trial.is_err() {
                // Whatever state the fault left, start afresh next time.
                service = None;
            }
            let (outcome, revoked_early) = match trial {
                Ok((cell, revoked)) => (Ok(cell), revoked),
                Err(e) => (Err(e), Vec::new()),
            };
            trials.push(Trial {
                index,
                seed,
                outcome,
                revoked_early,
            });
        }
        let mut cell = merge(row, fault, seed, trials);
        cell.backend = plan.contended.label(row);
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

/// Runs one trial of a cell on a running service: its measurement, and
/// the holds whose lease the servers showed ended early (etcd's
/// revocation by a resumed leader).
///
/// # Cancel safety
///
/// Cancelling kills the clients; the service may be left mid-fault.
pub async fn run_trial(
    service: &Service,
    row: Row,
    fault: Fault,
    plan: &Plan,
    shape: &Shape,
    lock: &str,
    logs: &TempDir,
) -> Result<(Cell, Vec<Hold>), String> {
    let resource = CheckingResource::start()
        .await
        .map_err(|e| format!("checking resource: {e}"))?;
    // Every client's history is timed from here.
    let origin_ns = now_ns();
    let addrs = service.proxied_addrs();
    let follower = if matches!(fault, Fault::IsolateFollower | Fault::StaleTurn)
        || (fault == Fault::PauseServer && service.members() > 1)
    {
        Some(follower_of(service).await?)
    } else {
        None
    };
    let mut proxies = Vec::new();
    let mut clients = Vec::new();
    for client in 0..plan.clients {
        let mut own = Vec::new();
        for (member, addr) in addrs.iter().enumerate() {
            // Under faults 8 and 11, even clients reach only the follower
            // that is cut off or paused, odd ones only the other members;
            // under fault 14 the victim alone reaches the follower.
            let on_follower = if fault == Fault::StaleTurn {
                client == shape.victim
            } else {
                client % 2 == 0
            };
            if let Some(f) = follower
                && (on_follower != (member == f))
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
        let mutant = row.mutant();
        let spawned = Spawn {
            url: &url,
            client,
            lock,
            mutant,
            origin_ns,
        };
        clients.push(spawn_client(plan, &resource, &spawned, logs)?);
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
    tokio::time::sleep(shape.lead).await;
    let target = Target {
        service,
        resource: &resource,
        pids: &pids,
        proxies: &proxies,
        ttl: plan.ttl,
        span: shape.span,
        linger: shape.linger,
        handover: shape.handover,
        victim: shape.victim,
        kill: shape.kill,
        hold: plan.hold,
        lock,
        follower,
    };
    let fault_began = now_ns();
    let outcome = target.run(fault).await;
    let fault_ended = now_ns();
    // Fault 10 kills its victim on purpose.
    let killed = match &outcome {
        Ok(t) if fault == Fault::KillClient => t.victim.map(|v| v.client as usize),
        _ => None,
    };
    let mut unheard = Vec::new();
    if let Ok(t) = &outcome {
        let resume_at = t.resume_ns();
        let least = if fault == Fault::None {
            plan.after
        } else {
            plan.least_after()
        };
        measure_after(&resource, plan, resume_at, least, killed).await;
        unheard = heard_since(&resource, plan, resume_at, killed).await;
    }
    let ended = now_ns();
    let record = resource.record();
    // Asked while every client still runs: a killed client's leases would
    // soon be gone for reasons of its own.
    let (revoked_early, revocation_note) = match &outcome {
        Ok(t) => match &t.revocation {
            Some(revocation) => {
                let cell =
                    Cell::measure(row, fault, plan.ttl, plan.clients, began, ended, &record, t);
                let holds = blamed_holds(&cell, &record);
                let (ended, note) = revocation.ended_early(service, &holds, &record.ends).await;
                (ended, Some(note))
            }
            None => (Vec::new(), None),
        },
        Err(_) => (Vec::new(), None),
    };
    let mut crashed = Vec::new();
    for (n, client) in clients.iter_mut().enumerate() {
        let _ = kill(Pid::from_raw(client.pid as i32), Signal::SIGCONT);
        if Some(n) == killed {
            let _ = client.child.kill().await;
            continue;
        }
        if let Ok(Some(status)) = client.child.try_wait() {
            crashed.push(format!("client {n} exited ({status}): {}", client.tail()));
        }
        let _ = client.child.kill().await;
    }
    let timeline = outcome?;
    let silence = plan.silence().as_nanos() as u64;
    let hung: Vec<u32> = (0..plan.clients)
        .filter(|c| {
            if unheard.contains(c) {
                return true;
            }
            let mut last = record.last_seen.get(c).copied().unwrap_or(began);
            if let Some(v) = timeline.victim.filter(|v| v.client == *c) {
                last = last.max(v.release_ns.unwrap_or(ended));
            }
            ended.saturating_sub(last) > silence
        })
        .collect();
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
    cell.notes.extend(revocation_note);
    let mode = match plan.contended {
        Contended::Lock | Contended::Many => Mode::Exclusive,
        Contended::Write => Mode::Write,
        Contended::Permit => Mode::Permit { limit: 1 },
    };
    let dead = killed.and_then(|n| u32::try_from(n).ok());
    // Every living client's history is complete up to the earliest of
    // their last batches; the killed one's ends where it died.
    let cut = record
        .history_until
        .iter()
        .filter(|(c, _)| Some(**c) != dead)
        .map(|(_, until)| *until)
        .min()
        .unwrap_or(0)
        .min(ended.saturating_sub(origin_ns));
    let calls = history::calls(&record.history, lock, cut, dead);
    let fencing = row.strong_tokens() || row.mutant().is_some();
    let checking = std::time::Instant::now();
    let ops: Vec<_> = calls.iter().map(|c| c.operation(mode)).collect();
    let verdict = tokio::task::spawn_blocking(move || history::check(&ops, fencing))
        .await
        .map_err(|e| format!("history check: {e}"))?;
    let took = checking.elapsed();
    let second_checking = std::time::Instant::now();
    let (second, calls) =
        tokio::task::spawn_blocking(move || (second::check(&calls, fencing), calls))
            .await
            .map_err(|e| format!("second history check: {e}"))?;
    let second_took = second_checking.elapsed();
    let file = HistoryFile {
        format: history_file::FORMAT.to_owned(),
        backend: plan.contended.label(row),
        fault: fault.number(),
        fault_id: fault.id().to_owned(),
        seed: format!("{:#x}", shape.seed),
        lock: lock.to_owned(),
        mode,
        fencing,
        cut_ns: cut,
        killed: dead,
        own_verdict: verdict.to_string(),
        second_verdict: second.to_string(),
        clients: HistoryFile::group(&calls),
    };
    record_second(&mut cell, plan, &verdict, &second, &file);
    if took > Duration::from_millis(500) {
        cell.notes
            .push(format!("the history check took {} ms", took.as_millis()));
    }
    match &verdict {
        Verdict::NotLinearizable { .. } => cell.history_not_linearizable = 1,
        Verdict::Unknown { .. } => cell.history_unknown = 1,
        Verdict::Linearizable => {}
    }
    let mut text = verdict.to_string();
    if matches!(verdict, Verdict::NotLinearizable { .. }) {
        // The whole explanation, for whoever replays the trial.
        eprintln!("fault-matrix: {} fault {fault}: {text}", row.id());
    }
    if text.len() > 600 {
        let cut = (0..=600)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    cell.history_verdict = Some(text);
    eprintln!(
        "fault-matrix: {} fault {fault}: set-up and warm-up {} ms, lead {} ms, fault {} ms, \
         after {} ms, history check {} ms, second check {} ms",
        plan.contended.label(row),
        (began - origin_ns) / 1_000_000,
        (fault_began - began) / 1_000_000,
        (fault_ended - fault_began) / 1_000_000,
        (ended - fault_ended) / 1_000_000,
        took.as_millis(),
        second_took.as_millis()
    );
    cell.crashed_clients = crashed.len() as u64;
    cell.notes.extend(crashed);
    cell.hung_clients = hung.len() as u64;
    if !hung.is_empty() {
        cell.notes.push(format!(
            "clients {hung:?} sent nothing for over {:?}",
            plan.silence()
        ));
    }
    if record.protocol_errors > 0 {
        cell.notes.push(format!(
            "{} unreadable client messages",
            record.protocol_errors
        ));
    }
    Ok((cell, revoked_early))
}

/// Records the second checker's verdict in `cell`, writes the history
/// file (every one with `--histories`; else only one the checkers disagree
/// on, into the temporary directory), with its timeline when a checker
/// found it not linearizable, and notes a disagreement with the file's name.
fn record_second(cell: &mut Cell, plan: &Plan, own: &Verdict, second: &Second, file: &HistoryFile) {
    match second {
        Second::NotLinearizable { .. } => cell.second_not_linearizable = 1,
        Second::Unknown => cell.second_unknown = 1,
        Second::Linearizable => {}
    }
    cell.second_verdict = Some(second.to_string());
    let own_bad = matches!(own, Verdict::NotLinearizable { .. });
    let second_bad = matches!(second, Second::NotLinearizable { .. });
    let decided = !matches!(own, Verdict::Unknown { .. }) && *second != Second::Unknown;
    let disagree = decided && own_bad != second_bad;
    let dir = match &plan.histories {
        Some(dir) => dir.clone(),
        None if disagree => std::env::temp_dir().join("fault-matrix-disagreements"),
        None => return,
    };
    let svg = (own_bad || second_bad).then(|| timeline::svg(file));
    let written = file.write(&dir, svg.as_deref());
    if let Err(e) = &written {
        eprintln!("fault-matrix: history file: {e}");
    }
    if disagree {
        let at = written.map_or_else(|e| format!("unwritten: {e}"), |p| p.display().to_string());
        let text = format!(
            "the checkers disagree: the project's says {}, {second} (history {at})",
            if own_bad {
                "not linearizable"
            } else {
                "linearizable"
            }
        );
        eprintln!(
            "fault-matrix: {} fault {}: {text}",
            file.backend, file.fault
        );
        cell.disagreements.push(text);
    }
}

/// Every hold a trial's vouched stale writes, late lost signals and
/// overlaps belong to, each with the key its grant reported.
fn blamed_holds(cell: &Cell, record: &Record) -> Vec<(Hold, String)> {
    let holds: BTreeSet<Hold> = cell
        .attributed
        .iter()
        .flat_map(|a| a.holds.iter().copied())
        .collect();
    holds
        .into_iter()
        .filter_map(|hold| {
            let grant = record
                .grants
                .iter()
                .find(|g| g.client == hold.client && g.token == hold.token)?;
            Some((hold, grant.key.clone()))
        })
        .collect()
}

/// Waits out the measurement after the heal: `plan.after` from
/// `resume_ns`, or, once `least` has passed, until every living client
/// has been granted the lock again (no client can then be stuck, and the
/// recovery has been seen).
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn measure_after(
    resource: &CheckingResource,
    plan: &Plan,
    resume_ns: u64,
    least: Duration,
    killed: Option<usize>,
) {
    let full = resume_ns + plan.after.as_nanos() as u64;
    let least = resume_ns + least.as_nanos() as u64;
    loop {
        let now = now_ns();
        if now >= full {
            return;
        }
        let recovered = || {
            (0..plan.clients)
                .filter(|&c| Some(c as usize) != killed)
                .all(|c| resource.granted_since(c, resume_ns))
        };
        if now >= least && recovered() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The living clients not heard from since `resume_ns`, once each has had
/// an acquisition's wait and two TTLs after it to speak (a waiting client
/// speaks when its acquisition succeeds or times out). Returns as soon as
/// every one has spoken, so a short trial is not lengthened, and a client
/// that hung at the heal is caught however short the trial.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn heard_since(
    resource: &CheckingResource,
    plan: &Plan,
    resume_ns: u64,
    killed: Option<usize>,
) -> Vec<u32> {
    let deadline = resume_ns + plan.silence().as_nanos() as u64;
    loop {
        let unheard: Vec<u32> = (0..plan.clients)
            .filter(|&c| Some(c as usize) != killed)
            .filter(|&c| resource.last_seen(c).is_none_or(|t| t < resume_ns))
            .collect();
        if unheard.is_empty() || now_ns() > deadline {
            return unheard;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What one client process is started with.
#[derive(Debug)]
struct Spawn<'a> {
    url: &'a str,
    client: u32,
    lock: &'a str,
    mutant: Option<Mutant>,
    origin_ns: u64,
}

fn spawn_client(
    plan: &Plan,
    resource: &CheckingResource,
    spawn: &Spawn<'_>,
    logs: &TempDir,
) -> Result<ClientProcess, String> {
    let Spawn {
        url,
        client,
        lock,
        mutant,
        origin_ns,
    } = *spawn;
    let log = logs
        .path()
        .join(format!("client-{}-{client}.log", now_ns()));
    let file = File::create(&log).map_err(|e| format!("client log: {e}"))?;
    let bin = plan.client_bin_for(mutant)?;
    let mut command = Command::new(&bin);
    if let Some(mutant) = mutant {
        command.arg("--mutant").arg(mutant.id());
    }
    command.arg("--origin-ns").arg(origin_ns.to_string());
    let child = command
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
        .arg(plan.wait().as_millis().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start {}: {e}", bin.display()))?;
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
