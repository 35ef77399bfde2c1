//! The operator's view of the plain layout: the holder's key and value
//! (token, description and grant time when distlock wrote it), its lease
//! left, and how many distlock clients wait; breaking the lock whoever
//! holds it. Other clients' waiters are not seen: they register nowhere.

use distlock_core::{HolderInfo, LockName, LockStatus, Result};

use super::value::holder_info;
use crate::keys::Space;
use crate::scripts::SCRIPTS;
use crate::servers::Servers;

/// The holder and the distlock waiters of lock `name`.
pub(crate) async fn inspect(servers: &Servers, name: &LockName) -> Result<LockStatus> {
    let keys = servers.keys.of(Space::Lock, name);
    let what = format!("inspecting lock {name}");
    let (value, left, waiting): (String, i64, usize) = servers.nodes[0]
        .eval(
            &SCRIPTS.plain_inspect,
            &[&keys.owner, &keys.waiters],
            &[],
            &what,
        )
        .await?;
    let mut status = LockStatus::free(name.clone());
    status.holder = (!value.is_empty()).then(|| holder_info(&keys.owner, &value, left));
    status.waiting = waiting;
    Ok(status)
}

/// Deletes lock `name`'s key whoever holds it; returns what was known of
/// the holder. A distlock holder's next renewal reports `Revoked`.
pub(crate) async fn force_release(
    servers: &Servers,
    name: &LockName,
) -> Result<Option<HolderInfo>> {
    let keys = servers.keys.of(Space::Lock, name);
    let what = format!("breaking lock {name}");
    let evicted: Option<(String, i64)> = servers.nodes[0]
        .eval(
            &SCRIPTS.plain_force_release,
            &[&keys.owner, &keys.revoked],
            &[],
            &what,
        )
        .await?;
    let evicted = evicted.map(|(value, left)| holder_info(&keys.owner, &value, left));
    if let Some(holder) = &evicted {
        tracing::info!(backend = servers.backend, lock = %name, layout = "plain", token = holder.token.get(), holder = holder.description.as_deref().unwrap_or(""), "lock broken");
    }
    Ok(evicted)
}
