//! Preparing the lock root at connect time, so that a root we may not use
//! fails `connect` with a typed error instead of the first `lock`.

use distlock_core::{ErrorKind, Result};
use uuid::Uuid;
use zookeeper_client as zk;

use crate::errors::ZkSite;
use crate::keys::Space;
use crate::session::Session;

/// Creates `{root}/locks` and `{root}/elections` if missing, then creates and
/// deletes a probe node under `{root}/locks` to prove we may create and
/// delete lock nodes there with our identity.
///
/// The Curator layout has no root: each name is its own path, created on
/// first use, so there is nothing to prepare (and no node of ours to leave
/// in another application's tree).
pub(crate) async fn prepare(session: &Session) -> Result<()> {
    let settings = &session.settings;
    let layout = &settings.layout;
    let (Some(lock_dir), Some(elections)) = (
        layout.space_dir(Space::Lock),
        layout.space_dir(Space::Election),
    ) else {
        return Ok(());
    };
    let action = format!("preparing lock root {}", layout.root());
    let doing = crate::errors::doing(&action, &settings.connect_string);
    let denied = |what: &str| {
        doing.error(
            ErrorKind::Unauthorized,
            format!(
                "{} may not {what}: an ACL set by another identity forbids it; check the username \
                 and password, or choose another lock root",
                settings.identity()
            ),
        )
    };
    let persistent = zk::CreateMode::Persistent.with_acls(session.acls());
    for dir in [&lock_dir, &elections] {
        match session.call(session.client.mkdir(dir, &persistent)).await {
            Ok(()) => {}
            Err(zk::Error::NoAuth) => return Err(denied(&format!("create {dir}"))),
            Err(e @ zk::Error::NoChildrenForEphemerals) => {
                return Err(doing
                    .error(ErrorKind::InvalidConfig,
                        format!("{dir} cannot be created: an ancestor is an ephemeral node; choose another lock root"),
                    )
                    .with_source(e));
            }
            Err(e @ (zk::Error::BadArguments(_) | zk::Error::NoNode | zk::Error::InvalidAcl)) => {
                return Err(doing
                    .error(
                        ErrorKind::InvalidConfig,
                        format!("{dir} cannot be created ({e}); choose another lock root"),
                    )
                    .with_source(e));
            }
            Err(e) => return Err(doing.client_error(e)),
        }
    }
    let probe = format!("{lock_dir}/%probe-{}", Uuid::new_v4());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(session.acls());
    match session
        .call(session.client.create(&probe, &[], &ephemeral))
        .await
    {
        Ok(_) => {}
        Err(zk::Error::NoAuth) => {
            return Err(denied(&format!("create lock nodes under {lock_dir}")));
        }
        Err(e) => return Err(doing.client_error(e)),
    }
    match session.call(session.client.delete(&probe, None)).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(zk::Error::NoAuth) => Err(denied(&format!("delete lock nodes under {lock_dir}"))),
        Err(e) => Err(doing.client_error(e)),
    }
}
