//! Picking free loopback ports.
//!
//! Ports come from below the kernel's ephemeral range, so that outgoing
//! client connections (which take ephemeral local ports) cannot grab the
//! port of a member that is down for a restart. A port is handed out only if
//! it can be bound on 127.0.0.1 right now and was not handed out before by
//! this process.

use std::collections::HashSet;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lowest port handed out.
const FLOOR: u16 = 12_000;
/// Random candidates tried before falling back to a kernel-chosen port.
const ATTEMPTS: usize = 500;

struct Allocator {
    handed_out: HashSet<u16>,
    rng: u64,
    ceiling: u16,
}

/// Returns a loopback port that is free now and unique in this process.
pub(crate) fn free_port() -> u16 {
    static ALLOCATOR: OnceLock<Mutex<Allocator>> = OnceLock::new();
    let mut alloc = ALLOCATOR
        .get_or_init(|| Mutex::new(Allocator::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    alloc.next()
}

impl Allocator {
    fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self {
            handed_out: HashSet::new(),
            rng: nanos ^ (u64::from(std::process::id()) << 32) | 1,
            ceiling: ephemeral_floor().max(FLOOR + 1_000),
        }
    }

    fn next(&mut self) -> u16 {
        let span = u64::from(self.ceiling - FLOOR);
        for _ in 0..ATTEMPTS {
            let candidate = FLOOR + (self.random() % span) as u16;
            if !self.handed_out.contains(&candidate) && bindable(candidate) {
                self.handed_out.insert(candidate);
                return candidate;
            }
        }
        loop {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|listener| listener.local_addr())
                .map(|addr| addr.port())
                .expect("binding 127.0.0.1:0 must work");
            if self.handed_out.insert(port) {
                return port;
            }
        }
    }

    /// xorshift64: good enough to spread ports between processes.
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

fn bindable(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// The first port of the kernel's ephemeral range (32768 if unknown).
fn ephemeral_floor() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}
