//! `distlock break NAME --yes`: evict a stuck holder.

use distlock::{LockBackend, LockName};

use crate::cli::{BreakArgs, TargetArgs};
use crate::exit::{FREE, Failure};
use crate::target;

pub(crate) async fn break_lock(args: BreakArgs, target: &TargetArgs) -> Result<u8, Failure> {
    let name = LockName::new(args.name.as_str())?;
    if !args.yes {
        return Err(Failure::usage(format!(
            "refusing to break lock {name} without --yes: its holder loses the lock while it \
             may still be working; check it with `distlock status {name}`, then run \
             `distlock break {name} --yes`"
        )));
    }
    let backend = target::connect_shared(target, "break").await?;
    match backend.force_release(&name).await? {
        Some(evicted) => {
            println!(
                "broke lock {name}: evicted token={} holder={}",
                evicted.token,
                evicted.description.as_deref().unwrap_or("unknown")
            );
            Ok(0)
        }
        None => {
            eprintln!("distlock: lock {name} is free; nothing was broken");
            Ok(FREE)
        }
    }
}
