//! The checking resource: the one place every client writes to, keeping
//! the two views a protected resource can have.
//!
//! - The **unfenced** view accepts every write, as a resource that ignores
//!   tokens would. Two clients' critical sections that interleave in it are
//!   overlaps: what ignoring tokens costs.
//! - The **fenced** view is a register that rejects a token lower than the
//!   highest it accepted. An accepted write that shares the highest token
//!   with another client is a fenced violation: two holders the tokens
//!   cannot tell apart.
//!
//! Both views are kept per lock name: a client holding several names at
//! once has a section open under each, and sections of different names do
//! not exclude each other. Each overlap is recorded with the two sections
//! it put together, so that a verdict can tell whose hold it was.
//!
//! It listens on a loopback TCP port in the runner's process; clients are
//! other processes. Order is arrival order, as a real resource sees it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::clock::now_ns;
use super::protocol::{End, Message, Phase, Reply, Section};

/// One grant as its begin write reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The client's number.
    pub client: u32,
    /// Its fencing token.
    pub token: u64,
    /// The client's acquisition counter.
    pub seq: u64,
    /// When the client got it.
    pub granted_ns: u64,
    /// When its begin write arrived.
    pub arrived_ns: u64,
    /// The backend key (node path) of the acquisition.
    pub key: String,
    /// The lock name.
    pub name: String,
}

/// A lost signal a client reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The client's number.
    pub client: u32,
    /// The token of the acquisition that was lost.
    pub token: u64,
    /// When the signal fired.
    pub at_ns: u64,
    /// The backend's reason.
    pub reason: String,
    /// The lock name of the acquisition.
    pub name: String,
}

/// Two clients' sections of one name interleaved: `entered` began while
/// `inside` was open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The lock name.
    pub name: String,
    /// The section that began: (client, token).
    pub entered: (u32, u64),
    /// The section that was still open: (client, token).
    pub inside: (u32, u64),
}

/// A write the client's guard vouched for (`is_held()` said yes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VouchedWrite {
    /// The client's number.
    pub client: u32,
    /// The token it wrote with.
    pub token: u64,
    /// When the guard was asked.
    pub checked_ns: u64,
    /// Whether the fenced register rejected it as stale.
    pub rejected: bool,
    /// The lock name.
    pub name: String,
}

/// Everything the resource recorded; the runner turns it into a cell.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Every grant, in arrival order of its begin write.
    pub grants: Vec<Grant>,
    /// Critical sections of two clients interleaved in the unfenced view.
    pub overlaps: u64,
    /// Each of those overlaps, with the sections it put together.
    pub overlap_pairs: Vec<Overlap>,
    /// Sections that another client entered before they ended.
    pub sections_overlapped: u64,
    /// Writes the fenced register accepted.
    pub accepted_writes: u64,
    /// Writes the fenced register rejected as stale.
    pub stale_rejected: u64,
    /// Accepted writes that broke the fenced view's promise.
    pub fenced_violations: u64,
    /// Writes made by a client whose guard already said it was not held.
    pub writes_after_loss_seen: u64,
    /// Every write made while the guard said held.
    pub vouched: Vec<VouchedWrite>,
    /// When each client was last heard from (a history batch is not
    /// counted: it is sent by a task of its own, even when the loop hangs).
    pub last_seen: HashMap<u32, u64>,
    /// Every client's history, each client's events in order.
    pub history: Vec<super::history::Event>,
    /// Up to when (relative to the trial's origin) each client's history
    /// has arrived.
    pub history_until: HashMap<u32, u64>,
    /// Every lost signal.
    pub lost: Vec<Lost>,
    /// The keys and leases clients ended themselves.
    pub ends: Vec<super::protocol::End>,
    /// Errors by `op:kind`, with the time of each.
    pub errors: Vec<(String, u64)>,
    /// Each client's process id.
    pub pids: HashMap<u32, u32>,
    /// Lines that were not a message.
    pub protocol_errors: u64,
}

#[derive(Debug, Default)]
struct State {
    record: Record,
    /// Open sections by name and client: (seq, token).
    open: BTreeMap<(String, u32), (u64, u64)>,
    /// Open sections another client entered: (name, client, seq).
    overlapped: BTreeSet<(String, u32, u64)>,
    /// The fenced register of each name: highest accepted token and who
    /// wrote it.
    high: HashMap<String, (u64, u32)>,
}

impl State {
    fn handle(&mut self, message: Message) -> Reply {
        let client = match &message {
            Message::Hello { client, .. }
            | Message::Lost { client, .. }
            | Message::Error { client, .. } => Some(*client),
            Message::Write { section, .. } => Some(section.client),
            Message::History { .. } => None,
        };
        if let Some(client) = client {
            self.record.last_seen.insert(client, now_ns());
        }
        match message {
            Message::History {
                client,
                events,
                until_ns,
                ends,
            } => {
                self.record.history.extend(events);
                self.record
                    .ends
                    .extend(ends.into_iter().map(|end| End { client, ..end }));
                let until = self.record.history_until.entry(client).or_default();
                *until = (*until).max(until_ns);
                Reply::Ok
            }
            Message::Hello { client, pid } => {
                self.record.pids.insert(client, pid);
                Reply::Ok
            }
            Message::Write {
                section,
                phase,
                held,
                checked_ns,
            } => {
                if !held {
                    self.record.writes_after_loss_seen += 1;
                }
                let (client, token) = (section.client, section.token);
                let name = section.name.clone();
                self.unfenced(section, phase);
                let reply = self.fenced(&name, client, token);
                if held {
                    self.record.vouched.push(VouchedWrite {
                        client,
                        token,
                        checked_ns,
                        rejected: reply == Reply::Stale,
                        name,
                    });
                }
                reply
            }
            Message::Lost {
                client,
                token,
                at_ns,
                reason,
                name,
            } => {
                self.record.lost.push(Lost {
                    client,
                    token,
                    at_ns,
                    reason,
                    name,
                });
                Reply::Ok
            }
            Message::Error {
                op, kind, at_ns, ..
            } => {
                self.record.errors.push((format!("{op}:{kind}"), at_ns));
                Reply::Ok
            }
        }
    }

    fn unfenced(&mut self, section: Section, phase: Phase) {
        let Section {
            client,
            token,
            seq,
            name,
            ..
        } = section;
        match phase {
            Phase::Begin => {
                self.record.grants.push(Grant {
                    client,
                    token,
                    seq,
                    granted_ns: section.granted_ns,
                    arrived_ns: now_ns(),
                    key: section.key,
                    name: name.clone(),
                });
                let inside = self
                    .open
                    .iter()
                    .filter(|((n, other), _)| *n == name && *other != client);
                for ((_, other), &(other_seq, other_token)) in inside {
                    self.record.overlaps += 1;
                    self.record.overlap_pairs.push(Overlap {
                        name: name.clone(),
                        entered: (client, token),
                        inside: (*other, other_token),
                    });
                    if self.overlapped.insert((name.clone(), *other, other_seq)) {
                        self.record.sections_overlapped += 1;
                    }
                }
                self.open.insert((name, client), (seq, token));
            }
            Phase::Keep => {}
            Phase::End => {
                let key = (name, client);
                if self.open.get(&key).is_some_and(|&(s, _)| s == seq) {
                    self.open.remove(&key);
                }
            }
        }
    }

    fn fenced(&mut self, name: &str, client: u32, token: u64) -> Reply {
        match self.high.get(name).copied() {
            Some((high, _)) if token < high => {
                self.record.stale_rejected += 1;
                Reply::Stale
            }
            Some((high, owner)) if token == high && owner != client => {
                self.record.fenced_violations += 1;
                self.record.accepted_writes += 1;
                Reply::Ok
            }
            _ => {
                self.record.accepted_writes += 1;
                self.high.insert(name.to_owned(), (token, client));
                Reply::Ok
            }
        }
    }
}

/// A running checking resource; dropping it stops listening.
#[derive(Debug)]
pub struct CheckingResource {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl CheckingResource {
    /// Listens on `127.0.0.1:0`. Must run inside a Tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled start leaves only a closed listener.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(Self {
            addr,
            state,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The client inside a critical section right now (the latest begin
    /// without an end), if any.
    pub fn holder(&self) -> Option<u32> {
        let state = self.state();
        let latest = state.record.grants.iter().rev().find(|g| {
            state
                .open
                .get(&(g.name.clone(), g.client))
                .is_some_and(|&(seq, _)| seq == g.seq)
        })?;
        Some(latest.client)
    }

    /// Whether `client` is inside its critical section `seq` (under any
    /// name).
    pub fn is_open(&self, client: u32, seq: u64) -> bool {
        self.state()
            .open
            .iter()
            .any(|((_, c), &(s, _))| *c == client && s == seq)
    }

    /// An open section of `client` (the first by name): (seq, token).
    pub fn open_section(&self, client: u32) -> Option<(u64, u64)> {
        self.state()
            .open
            .iter()
            .find(|((_, c), _)| *c == client)
            .map(|(_, &section)| section)
    }

    /// Ends `client`'s open sections, if any: its process was killed, and
    /// a dead process writes nothing more.
    pub fn end_section_of_dead(&self, client: u32) {
        self.state().open.retain(|(_, c), _| *c != client);
    }

    /// How many grants have been reported.
    pub fn acquisitions(&self) -> usize {
        self.state().record.grants.len()
    }

    /// When `client` was last heard from (history batches aside), if ever.
    pub fn last_seen(&self, client: u32) -> Option<u64> {
        self.state().record.last_seen.get(&client).copied()
    }

    /// Whether `client` has been granted the lock at or after `since_ns`.
    pub fn granted_since(&self, client: u32, since_ns: u64) -> bool {
        self.state()
            .record
            .grants
            .iter()
            .rev()
            .take_while(|g| g.granted_ns >= since_ns)
            .any(|g| g.client == client)
    }

    /// A copy of everything recorded so far.
    pub fn record(&self) -> Record {
        self.state().record.clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Drop for CheckingResource {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    // The connection tasks end with the runtime or when their client goes.
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, Arc::clone(&state)));
    }
}

async fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = match serde_json::from_str::<Message>(&line) {
            Ok(message) => lock(&state).handle(message),
            Err(_) => {
                lock(&state).record.protocol_errors += 1;
                return;
            }
        };
        let mut text = serde_json::to_string(&reply).expect("a reply serializes");
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(client: u32, token: u64, seq: u64, phase: Phase) -> Message {
        let section = Section {
            client,
            token,
            seq,
            granted_ns: 0,
            key: String::new(),
            name: "l".into(),
        };
        section.write(phase, true, now_ns())
    }

    #[test]
    fn a_paused_holders_late_write_is_an_overlap_and_is_rejected_when_fenced() {
        let mut state = State::default();
        assert_eq!(state.handle(write(1, 10, 0, Phase::Begin)), Reply::Ok);
        assert_eq!(state.handle(write(2, 11, 0, Phase::Begin)), Reply::Ok);
        assert_eq!(state.handle(write(1, 10, 0, Phase::End)), Reply::Stale);
        assert_eq!(state.handle(write(2, 11, 0, Phase::End)), Reply::Ok);
        assert_eq!(state.record.overlaps, 1);
        assert_eq!(state.record.stale_rejected, 1);
        assert_eq!(state.record.fenced_violations, 0);
    }

    #[test]
    fn two_clients_sharing_a_token_is_a_fenced_violation() {
        let mut state = State::default();
        state.handle(write(1, 5, 0, Phase::Begin));
        state.handle(write(2, 5, 0, Phase::Begin));
        assert_eq!(state.record.fenced_violations, 1);
        assert_eq!(state.record.overlaps, 1);
        assert_eq!(
            state.record.overlap_pairs[0],
            Overlap {
                name: "l".into(),
                entered: (2, 5),
                inside: (1, 5),
            }
        );
    }

    #[test]
    fn sections_of_different_names_do_not_overlap_and_are_fenced_apart() {
        let mut state = State::default();
        let mut on = |name: &str, client, token, phase| {
            let mut message = write(client, token, 0, phase);
            if let Message::Write { section, .. } = &mut message {
                section.name = name.into();
            }
            state.handle(message)
        };
        assert_eq!(on("a", 1, 10, Phase::Begin), Reply::Ok);
        assert_eq!(on("b", 2, 5, Phase::Begin), Reply::Ok);
        assert_eq!(on("a", 1, 10, Phase::End), Reply::Ok);
        assert_eq!(on("b", 2, 5, Phase::End), Reply::Ok);
        assert_eq!((state.record.overlaps, state.record.stale_rejected), (0, 0));
    }
}
