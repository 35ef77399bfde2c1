//! The ACL every lock and election node is created with.
//!
//! With digest credentials, the creator's identity gets every right and
//! everyone else may only read: another identity can see who holds a lock
//! but cannot delete its node (deleting needs DELETE on the parent, which is
//! ours too) or create nodes in our directories.

use zookeeper_client::{Acl, Acls, Permission};

static OWNER_ALL_WORLD_READ: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// `auth:ALL, world:anyone:READ` when authenticated, else `world:anyone:ALL`.
pub(crate) fn node_acls(authenticated: bool) -> Acls<'static> {
    if authenticated {
        Acls::new(&OWNER_ALL_WORLD_READ)
    } else {
        Acls::anyone_all()
    }
}
