//! Another client library's Redis lock in a process of its own, driven one
//! command at a time: redis-py's `Lock` under Debian's `/usr/bin/python3`,
//! or node-redlock under Debian's `node`. Both keep a lock the way
//! distlock's `layout=plain` does (`SET <name> <random> NX PX <ttl>`), so
//! tests set them against each other across processes.
//!
//! The peer answers every command with one line (see the scripts in
//! `lock_peer/`); each answer is awaited with a timeout, never a sleep.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// How long a peer may take to answer one command.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

const REDIS_PY: &str = include_str!("lock_peer/redis_py.py");
const NODE_REDLOCK: &str = include_str!("lock_peer/node_redlock.js");

/// Debian's Python, not a pyenv shim that may lack the module.
const PYTHON: &str = "/usr/bin/python3";
/// Where scripts/install-servers.sh puts node-redlock and ioredis.
pub const NODE_MODULES: &str = "/usr/local/lib/distlock-node/node_modules";

/// Which library the peer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// redis-py's `Lock` (Debian's `python3-redis`).
    RedisPy,
    /// node-redlock 4 over ioredis, on one server.
    NodeRedlock,
}

/// A peer process holding (or trying for) one lock.
#[derive(Debug)]
pub struct LockPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    library: Library,
}

impl LockPeer {
    /// Starts a peer for the lock `name` on the Redis at 127.0.0.1:`port`,
    /// with leases of `ttl`. Panics, naming the install command, when the
    /// library is missing.
    pub fn start(library: Library, port: u16, name: &str, ttl: Duration) -> LockPeer {
        let mut command = command_for(library);
        command
            .args([
                port.to_string(),
                name.to_owned(),
                ttl.as_millis().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!("cannot start the {library:?} peer ({e}); run scripts/install-servers.sh")
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = LockPeer {
            stdin: child.stdin.take(),
            child,
            lines,
            library,
        };
        let first = peer.next_line();
        assert_eq!(first, "ready", "the {library:?} peer did not start");
        peer
    }

    /// Sends `command` and returns the peer's answer.
    pub fn ask(&mut self, command: &str) -> String {
        let stdin = self.stdin.as_mut().expect("the peer was killed");
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{:?} peer: sending {command}: {e}", self.library));
        self.next_line()
    }

    /// Kills the process at once: the lock it holds stays until its TTL.
    pub fn kill(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn next_line(&mut self) -> String {
        match self.lines.recv_timeout(ANSWER_WITHIN) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "{:?} peer: no answer within {ANSWER_WITHIN:?}",
                    self.library
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait();
                panic!(
                    "{:?} peer exited ({status:?}); is the library installed? run scripts/install-servers.sh",
                    self.library
                )
            }
        }
    }
}

impl Drop for LockPeer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The command that runs `library`'s script, after checking that the
/// library loads.
fn command_for(library: Library) -> Command {
    let (program, script, env) = match library {
        Library::RedisPy => (PYTHON, REDIS_PY, None),
        Library::NodeRedlock => ("node", NODE_REDLOCK, Some(node_modules())),
    };
    let (flag, probe) = match library {
        Library::RedisPy => ("-c", "import redis"),
        Library::NodeRedlock => ("-e", "require('redlock'); require('ioredis')"),
    };
    let mut check = Command::new(program);
    check
        .args([flag, probe])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(path) = &env {
        check.env("NODE_PATH", path);
    }
    let loads = check.status().is_ok_and(|s| s.success());
    assert!(
        loads,
        "{library:?} is missing: {program} {flag} {probe:?} failed; run scripts/install-servers.sh \
         ({})",
        match library {
            Library::RedisPy => "apt-get install python3-redis".to_owned(),
            Library::NodeRedlock => format!(
                "npm install --prefix {} redlock@4 ioredis@5",
                node_prefix().display()
            ),
        }
    );
    let mut command = Command::new(program);
    match library {
        Library::RedisPy => command.args(["-c", script]),
        // `node -e` takes the arguments after `--`.
        Library::NodeRedlock => command.args(["-e", script, "--"]),
    };
    if let Some(path) = env {
        command.env("NODE_PATH", path);
    }
    command
}

/// `NODE_MODULES`, or `DISTLOCK_NODE_MODULES` when set.
fn node_modules() -> PathBuf {
    std::env::var_os("DISTLOCK_NODE_MODULES")
        .map_or_else(|| PathBuf::from(NODE_MODULES), PathBuf::from)
}

/// The directory npm installs `node_modules` under.
fn node_prefix() -> PathBuf {
    node_modules()
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
}
