//! `distlock status NAME [--json]`: who holds a lock and who waits.

use std::fmt::Write as _;
use std::time::SystemTime;

use distlock::{HolderInfo, LockStatus, Primitive};
use distlock::{LockBackend, LockName, human_duration};
use serde_json::{Value, json};

use crate::cli::{StatusArgs, TargetArgs};
use crate::exit::{FREE, Failure};
use crate::target;
use crate::timestamp::{rfc3339, unix_ms};

pub(crate) async fn status(args: StatusArgs, target: &TargetArgs) -> Result<u8, Failure> {
    let name = LockName::new(args.name.as_str())?;
    let backend = target::connect_shared(target, "status").await?;
    let status = backend.inspect(&name).await?;
    let text = if args.json {
        to_json(&status).to_string()
    } else {
        let caps = backend.capabilities();
        let lease = Lease {
            reported: caps.admin.lease_left,
            backend: caps.backend,
        };
        to_text(&status, backend.description(), lease, SystemTime::now())
    };
    println!("{}", text.trim_end());
    Ok(if status.is_held() { 0 } else { FREE })
}

/// The holder as JSON; fields the backend does not know are `null`.
pub(crate) fn holder_json(holder: &HolderInfo) -> Value {
    json!({
        "key": holder.key,
        "token": holder.token.get(),
        "description": holder.description,
        "acquired_at": holder.acquired_at.map(rfc3339),
        "acquired_at_unix_ms": holder.acquired_at.map(unix_ms),
        "lease_left_ms": holder.lease_left.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    })
}

fn to_json(status: &LockStatus) -> Value {
    json!({
        "name": status.name.as_str(),
        "primitive": status.primitive.as_str(),
        "held": status.is_held(),
        "holder": status.holder.as_ref().map(holder_json),
        "waiting": status.waiting,
        "waiters": status.waiters.iter().map(|w| json!({
            "key": w.key,
            "description": w.description,
        })).collect::<Vec<_>>(),
    })
}

/// Whether the backend reports the time left on a holder's lease, and its
/// name, to say why a lease left is unknown.
#[derive(Debug, Clone, Copy)]
struct Lease {
    reported: bool,
    backend: &'static str,
}

fn to_text(status: &LockStatus, url: &str, lease: Lease, now: SystemTime) -> String {
    let mut out = String::new();
    let state = if status.is_held() { "held" } else { "free" };
    let kind = status.primitive.as_str();
    let _ = writeln!(out, "{kind} {} on {url}: {state}", status.name);
    if let Some(holder) = &status.holder {
        let unknown = || "unknown".to_owned();
        // An election's holder is its leader, shown by its value.
        let who = if status.primitive == Primitive::Election {
            "leader:    "
        } else {
            "holder:    "
        };
        let _ = writeln!(
            out,
            "  {who} {}",
            holder.description.clone().unwrap_or_else(unknown)
        );
        let _ = writeln!(out, "  token:      {}", holder.token);
        let _ = writeln!(out, "  key:        {}", holder.key);
        let since = holder.acquired_at.map_or_else(unknown, |at| {
            let ago = now.duration_since(at).unwrap_or_default();
            format!("{} ({} ago)", rfc3339(at), human_duration(ago))
        });
        let _ = writeln!(out, "  since:      {since}");
        // ZooKeeper ties a lock to its holder's session, whose timeout
        // another client cannot read: say so rather than a bare unknown.
        let left = match holder.lease_left {
            Some(left) => human_duration(left),
            None if !lease.reported => format!(
                "unknown (the {} backend does not report it; the lock lasts while its holder's \
                 session or lease does)",
                lease.backend
            ),
            None => unknown(),
        };
        let _ = writeln!(out, "  lease left: {left}");
    }
    let _ = writeln!(out, "  waiting:    {}", status.waiting);
    for (i, waiter) in status.waiters.iter().enumerate() {
        let who = waiter
            .description
            .as_deref()
            .or(waiter.key.as_deref())
            .unwrap_or("unknown");
        let _ = writeln!(out, "    {}. {who}", i + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use distlock::FencingToken;
    use distlock::WaiterInfo;

    use super::*;

    #[test]
    fn text_shows_holder_lease_and_waiters() {
        let at = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let status = LockStatus {
            name: LockName::new("jobs/a").unwrap(),
            primitive: Primitive::Lock,
            holder: Some(HolderInfo {
                key: "k#3".into(),
                token: FencingToken(3),
                description: Some("worker-1".into()),
                acquired_at: Some(at),
                lease_left: Some(Duration::from_millis(27_767)),
            }),
            waiting: 1,
            waiters: vec![WaiterInfo {
                key: None,
                description: Some("worker-2".into()),
            }],
        };
        let file = Lease {
            reported: true,
            backend: "file",
        };
        let text = to_text(&status, "file:///x", file, at + Duration::from_secs(5));
        assert!(
            text.starts_with("lock jobs/a on file:///x: held\n"),
            "{text}"
        );
        for line in [
            "holder:     worker-1",
            "token:      3",
            "(5 s ago)",
            "lease left: 27.8 s",
            "waiting:    1",
            "1. worker-2",
        ] {
            assert!(text.contains(line), "{line:?} in {text}");
        }
        let mut unreported = status.clone();
        unreported.holder.as_mut().unwrap().lease_left = None;
        let zk = Lease {
            reported: false,
            backend: "zk",
        };
        let text = to_text(&unreported, "zk://x", zk, at);
        assert!(
            text.contains("lease left: unknown (the zk backend does not report it;"),
            "{text}"
        );
        let json = to_json(&status);
        assert_eq!(json["holder"]["token"], 3);
        assert_eq!(json["holder"]["lease_left_ms"], 27_767);
        assert_eq!(json["primitive"], "lock");
        assert_eq!(json["waiters"][0]["description"], "worker-2");
    }
}
