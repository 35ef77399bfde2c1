//! The statements the table layout sends, with the table names filled in.
//!
//! Leases are judged by `SYSDATE(6)`, the server's clock when the function
//! runs, never by `NOW(6)`, which MySQL fixes at the start of the
//! statement: a statement that waited for a row lock would otherwise judge
//! (and extend) a lease by a clock reading taken before its wait, and could
//! revive a lease that ran out meanwhile. (A server started with
//! `--sysdate-is-now` makes the two the same; do not run one so.)

use crate::schema::Tables;

/// The statements of one table prefix.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    /// Creates the key's row if missing and locks it: the requests of one
    /// key run one at a time from here to their commit.
    pub(crate) lock_key: String,
    /// Locks an existing key's row and reads its counter.
    pub(crate) lock_used_key: String,
    pub(crate) last_token: String,
    pub(crate) set_last_token: String,
    pub(crate) delete_expired: String,
    pub(crate) queue_of: String,
    pub(crate) insert_entry: String,
    pub(crate) grant_entry: String,
    pub(crate) extend_entry: String,
    pub(crate) delete_owner: String,
    pub(crate) release_live: String,
    pub(crate) renew: String,
    pub(crate) owner_exists: String,
    pub(crate) proclaim: String,
    pub(crate) entries_of: String,
    pub(crate) delete_granted: String,
    pub(crate) keys_under: String,
    pub(crate) fence_key: String,
    pub(crate) fence_entry: String,
}

/// Columns an operator's view reads from an entry, in this order.
const VIEW: &str = "e.k, e.granted, e.token, e.holder, e.value, \
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', e.granted_at), \
    GREATEST(0, TIMESTAMPDIFF(MICROSECOND, SYSDATE(6), e.expires_at))";

impl Sql {
    /// The statements for `tables`.
    pub(crate) fn new(t: &Tables) -> Self {
        let (keys, entries) = (&t.keys, &t.entries);
        Sql {
            lock_key: format!(
                "INSERT INTO {keys} (k, last_token) VALUES (?, 0) \
                 ON DUPLICATE KEY UPDATE last_token = last_token"
            ),
            lock_used_key: format!("SELECT last_token FROM {keys} WHERE k = ? FOR UPDATE"),
            last_token: format!("SELECT last_token FROM {keys} WHERE k = ?"),
            set_last_token: format!("UPDATE {keys} SET last_token = ? WHERE k = ?"),
            delete_expired: format!(
                "DELETE FROM {entries} WHERE k = ? AND expires_at <= SYSDATE(6)"
            ),
            queue_of: format!(
                "SELECT id, owner, access, permits, granted, token, \
                        TIMESTAMPDIFF(MICROSECOND, SYSDATE(6), expires_at) \
                   FROM {entries} WHERE k = ? ORDER BY id"
            ),
            insert_entry: format!(
                "INSERT INTO {entries} (k, owner, access, permits, granted, token, holder, value, \
                                        queued_at, granted_at, expires_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, SYSDATE(6), \
                         IF(?, SYSDATE(6), NULL), SYSDATE(6) + INTERVAL ? MICROSECOND)"
            ),
            grant_entry: format!(
                "UPDATE {entries} SET granted = 1, token = ?, holder = ?, value = ?, \
                        granted_at = SYSDATE(6), expires_at = SYSDATE(6) + INTERVAL ? MICROSECOND \
                  WHERE id = ?"
            ),
            extend_entry: format!(
                "UPDATE {entries} SET expires_at = SYSDATE(6) + INTERVAL ? MICROSECOND WHERE id = ?"
            ),
            delete_owner: format!("DELETE FROM {entries} WHERE owner = ?"),
            release_live: format!(
                "DELETE FROM {entries} WHERE owner = ? AND granted = 1 AND expires_at > SYSDATE(6)"
            ),
            renew: format!(
                "UPDATE {entries} SET expires_at = SYSDATE(6) + INTERVAL ? MICROSECOND \
                  WHERE owner = ? AND granted = 1 AND expires_at > SYSDATE(6)"
            ),
            owner_exists: format!("SELECT COUNT(*) FROM {entries} WHERE owner = ?"),
            proclaim: format!(
                "UPDATE {entries} SET value = ? \
                  WHERE owner = ? AND granted = 1 AND expires_at > SYSDATE(6)"
            ),
            entries_of: format!(
                "SELECT {VIEW} FROM {entries} e \
                  WHERE e.k = ? AND e.expires_at > SYSDATE(6) ORDER BY e.id"
            ),
            delete_granted: format!("DELETE FROM {entries} WHERE k = ? AND granted = 1"),
            keys_under: format!(
                "SELECT e.k, MAX(IF(e.granted = 1, e.token, NULL)), SUM(e.granted = 0) \
                   FROM {entries} e \
                  WHERE e.expires_at > SYSDATE(6) AND LEFT(e.k, ?) = ? \
                  GROUP BY e.k"
            ),
            fence_key: format!("SELECT last_token FROM {keys} WHERE k = ? LOCK IN SHARE MODE"),
            fence_entry: format!(
                "SELECT COUNT(*) FROM {entries} \
                  WHERE k = ? AND token = ? AND granted = 1 AND expires_at > UTC_TIMESTAMP(6)"
            ),
        }
    }
}
