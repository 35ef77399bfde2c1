//! Network namespaces that let a test cut one server off from its peers
//! while its clients still reach it.
//!
//! Every member gets a network namespace of its own, with only a loopback
//! device and one veth link to a bridge in a hub namespace. That bridge is a
//! private segment, `198.18.0.0/24` (the range set aside for network
//! tests), which no other network stack sees: peer traffic never leaves the
//! namespaces created here. Taking a member's bridge port down drops its
//! peer traffic in both directions, silently, like a partition: open
//! connections stall, nothing is reset, and whoever dialed whom does not
//! matter. Bringing the port up heals it.
//!
//! Clients do not use that segment: a member listens for them on a Unix
//! socket in its directory (file system paths cross network namespaces),
//! and [`super::unix_relay::UnixRelay`] forwards a host loopback port to it.
//!
//! Namespaces are named `distlock-<pid>-<n>-...` and deleted on drop (the
//! veth links go with them); ones left behind by a test process that was
//! killed are deleted by the next one that creates namespaces.

use std::ffi::OsStr;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use super::LaunchError;
use super::binary::Requirement;
use super::process::tool_output;

const IP: Requirement = Requirement {
    name: "ip",
    package: "iproute2",
};
/// Where iproute2 installs `ip`, for a PATH without `/usr/sbin`.
const IP_FALLBACK: &str = "/usr/sbin/ip";
/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";
const PREFIX: &str = "distlock-";
/// The bridge in the hub namespace, and each member's link to it.
const BRIDGE: &str = "br0";
const MEMBER_LINK: &str = "peer0";

/// A hub namespace with a bridge, and one namespace per member linked to it.
#[derive(Debug)]
pub(crate) struct PeerNet {
    ip: PathBuf,
    hub: String,
    members: Vec<String>,
}

impl PeerNet {
    /// Creates the namespaces and links for `members` members.
    ///
    /// Needs root (or `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and `ip` from
    /// iproute2.
    pub(crate) fn create(members: usize) -> Result<Self, LaunchError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Not every user has the sbin directories on PATH.
        let ip = IP.on_path().or_else(|missing| {
            IP.executable_at(Path::new(IP_FALLBACK))
                .map_err(|_| missing)
        })?;
        remove_stale(&ip);
        let base = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // Built before the first namespace exists, so that a failure half
        // way deletes whatever was created.
        let mut net = Self {
            ip,
            hub: format!("{base}-hub"),
            members: Vec::new(),
        };
        net.ip(["netns", "add", &net.hub])?;
        net.ip_in(&net.hub, ["link", "add", BRIDGE, "type", "bridge"])?;
        net.ip_in(&net.hub, ["link", "set", BRIDGE, "up"])?;
        for index in 0..members {
            let ns = format!("{base}-n{}", index + 1);
            net.ip(["netns", "add", &ns])?;
            net.members.push(ns.clone());
            let port = hub_port(index);
            let addr = format!("{}/24", Self::peer_ip(index));
            net.ip_in(&ns, ["link", "set", "lo", "up"])?;
            net.ip_in(
                &net.hub,
                [
                    "link",
                    "add",
                    &port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    MEMBER_LINK,
                    "netns",
                    &ns,
                ],
            )?;
            net.ip_in(&net.hub, ["link", "set", &port, "master", BRIDGE, "up"])?;
            net.ip_in(&ns, ["addr", "add", &addr, "dev", MEMBER_LINK])?;
            net.ip_in(&ns, ["link", "set", MEMBER_LINK, "up"])?;
        }
        Ok(net)
    }

    /// The `ip` binary (members run as `ip netns exec NS program ...`).
    pub(crate) fn ip_binary(&self) -> &Path {
        &self.ip
    }

    /// The namespace of member `index`.
    pub(crate) fn namespace(&self, index: usize) -> &str {
        &self.members[index]
    }

    /// The address of member `index` on the peer segment.
    pub(crate) fn peer_ip(index: usize) -> Ipv4Addr {
        let host = u8::try_from(index + 1).expect("at most 254 members on one peer segment");
        Ipv4Addr::new(198, 18, 0, host)
    }

    /// Drops all peer traffic of member `index` until [`PeerNet::heal`].
    pub(crate) fn cut(&self, index: usize) -> Result<(), LaunchError> {
        self.ip_in(&self.hub, ["link", "set", &hub_port(index), "down"])
    }

    /// Lets peer traffic of member `index` through again.
    pub(crate) fn heal(&self, index: usize) -> Result<(), LaunchError> {
        self.ip_in(&self.hub, ["link", "set", &hub_port(index), "up"])
    }

    fn ip_in<'a>(
        &self,
        ns: &'a str,
        args: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), LaunchError> {
        self.ip(["-n", ns].into_iter().chain(args))
    }

    fn ip<'a>(&self, args: impl IntoIterator<Item = &'a str>) -> Result<(), LaunchError> {
        run(&self.ip, args)
    }
}

impl Drop for PeerNet {
    fn drop(&mut self) {
        for ns in self.members.iter().chain([&self.hub]) {
            let _ = run(&self.ip, ["netns", "delete", ns.as_str()]);
        }
    }
}

/// The hub's end of the link to member `index`.
fn hub_port(index: usize) -> String {
    format!("m{}", index + 1)
}

/// Runs `ip ARGS`, failing with its stderr.
fn run<'a>(ip: &Path, args: impl IntoIterator<Item = &'a str>) -> Result<(), LaunchError> {
    let args: Vec<&str> = args.into_iter().collect();
    let what = format!("{} {}", ip.display(), args.join(" "));
    let mut command = Command::new(ip);
    command.args(args.iter().map(OsStr::new));
    let output = tool_output(command, &what)?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(LaunchError::Io {
        what,
        source: io::Error::other(format!(
            "{} ({}); network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)",
            stderr.trim(),
            output.status
        )),
    })
}

/// Deletes `distlock-<pid>-...` namespaces whose process is gone.
fn remove_stale(ip: &Path) {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(ip, ["netns", "delete", name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use super::*;

    fn link_state(net: &PeerNet, index: usize) -> String {
        let output = Command::new(&net.ip)
            .args(["-n", &net.hub, "-o", "link", "show", &hub_port(index)])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    #[test]
    fn cut_and_heal_toggle_only_that_members_port() {
        let net = PeerNet::create(2).expect("create namespaces");
        net.cut(1).expect("cut");
        assert!(link_state(&net, 1).contains("state DOWN"));
        assert!(!link_state(&net, 0).contains("state DOWN"));
        net.heal(1).expect("heal");
        assert!(!link_state(&net, 1).contains("state DOWN"));
    }

    #[test]
    fn namespaces_are_deleted_on_drop_even_after_a_panic() {
        let mut names = Vec::new();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let net = PeerNet::create(2).expect("create namespaces");
            names.extend(net.members.iter().chain([&net.hub]).cloned());
            panic!("the test body fails");
        }));
        assert!(outcome.is_err());
        assert_eq!(names.len(), 3);
        for ns in names {
            assert!(!Path::new(NETNS_DIR).join(&ns).exists(), "{ns} is left");
        }
    }
}
