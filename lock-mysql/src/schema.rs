//! The lock tables, created and upgraded by the client on first connect.
//!
//! Three InnoDB tables, their names starting with the configured prefix
//! (`distlock_` by default):
//!
//! - `keys`: one row per key ever used, holding `last_token`, the key's
//!   fencing token counter. Every request that grants, hands over or
//!   removes entries of a key locks this row first (`SELECT … FOR UPDATE`,
//!   or for a new key `INSERT … ON DUPLICATE KEY UPDATE`, both of which
//!   take it exclusively), so the requests of one key
//!   run one at a time, and a grant's token is `last_token + 1`, written in
//!   the granting transaction. The row is never deleted, so the counter
//!   never goes back: not after a release, not after a restart (it is an
//!   ordinary committed row, unlike an `AUTO_INCREMENT` counter, which
//!   MySQL 5.7 recomputed from the table's rows on restart).
//! - `entries`: every queue, a row per holder or waiter of a key in
//!   arrival order (`id`, `AUTO_INCREMENT`; inserts of one key are
//!   serialised by its `keys` row, so ids follow arrival). Rows carry their
//!   own expiry, judged by the server's clock.
//! - `migrations`: the versions applied.
//!
//! Keys are `VARBINARY`: compared byte for byte, never by a collation that
//! would fold `Jobs` and `jobs` into one lock.
//!
//! MySQL commits DDL implicitly, so a migration cannot be one transaction.
//! Instead every statement is idempotent (`CREATE TABLE IF NOT EXISTS`),
//! clients that start at once serialise on a named lock (`GET_LOCK`, on a
//! connection of its own), and each reads the version again once it holds
//! that lock, so only the first runs the statements. The lock wait and the
//! DDL's metadata-lock wait are both bounded.

use distlock_core::{Error, Result};
use mysql_async::prelude::Queryable;

use crate::config::MysqlConfig;
use crate::errors::from_mysql;

/// The version the code below creates; recorded in `migrations`.
pub(crate) const VERSION: i32 = 1;
/// "Table doesn't exist".
const NO_SUCH_TABLE: u16 = 1146;

/// The names of the lock tables under a prefix.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    pub(crate) keys: String,
    pub(crate) entries: String,
    pub(crate) migrations: String,
}

impl Tables {
    pub(crate) fn new(prefix: &str) -> Self {
        Tables {
            keys: format!("`{prefix}keys`"),
            entries: format!("`{prefix}entries`"),
            migrations: format!("`{prefix}migrations`"),
        }
    }
}

/// Creates the lock tables unless version [`VERSION`] is recorded.
pub(crate) async fn migrate(config: &MysqlConfig) -> Result<()> {
    let tables = Tables::new(&config.table_prefix);
    let mut conn = crate::connect::open(config).await?;
    let context = format!(
        "create the lock tables {}* in database {}",
        config.table_prefix,
        config.database.as_deref().unwrap_or("")
    );
    let my = |e| from_mysql(e, &context);
    if current_version(&mut conn, &tables, &context).await? >= VERSION {
        let _ = conn.disconnect().await;
        return Ok(());
    }
    let wait = crate::connect::lock_wait_seconds(config.request_timeout);
    let lock_name = format!(
        "distlock migration {}.{}",
        config.database.as_deref().unwrap_or(""),
        config.table_prefix
    );
    let got: Option<Option<i64>> = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (&lock_name, wait))
        .await
        .map_err(my)?;
    if got.flatten() != Some(1) {
        return Err(Error::unavailable(format!(
            "could not {context}: another client held the migration lock for {wait} s"
        )));
    }
    if current_version(&mut conn, &tables, &context).await? < VERSION {
        for statement in migration(&tables) {
            conn.query_drop(statement).await.map_err(my)?;
        }
    }
    let _ = conn
        .exec_drop("SELECT RELEASE_LOCK(?)", (&lock_name,))
        .await;
    // Closing the session releases the lock in any case.
    let _ = conn.disconnect().await;
    Ok(())
}

async fn current_version(
    conn: &mut mysql_async::Conn,
    tables: &Tables,
    context: &str,
) -> Result<i32> {
    let read: std::result::Result<Option<Option<i32>>, _> = conn
        .query_first(format!("SELECT MAX(version) FROM {}", tables.migrations))
        .await;
    let version = match read {
        Ok(version) => version.flatten().unwrap_or(0),
        Err(e) if crate::errors::server_code(&e) == Some(NO_SUCH_TABLE) => 0,
        Err(e) => return Err(from_mysql(e, context)),
    };
    if version > VERSION {
        return Err(Error::invalid_config(format!(
            "the lock tables {} are of version {version}, newer than this distlock-mysql \
             understands ({VERSION}); upgrade distlock-mysql",
            tables.migrations
        )));
    }
    Ok(version)
}

/// The statements of the migration, each idempotent.
fn migration(t: &Tables) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version INT PRIMARY KEY,
                applied_at DATETIME(6) NOT NULL
            ) ENGINE=InnoDB",
            t.migrations
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                k VARBINARY(1024) NOT NULL PRIMARY KEY,
                last_token BIGINT UNSIGNED NOT NULL DEFAULT 0
            ) ENGINE=InnoDB",
            t.keys
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
                k VARBINARY(1024) NOT NULL,
                owner CHAR(36) CHARACTER SET ascii NOT NULL,
                access VARCHAR(8) CHARACTER SET ascii NOT NULL,
                permits INT UNSIGNED NULL,
                granted TINYINT(1) NOT NULL DEFAULT 0,
                token BIGINT UNSIGNED NULL,
                holder VARBINARY(1024) NULL,
                value MEDIUMBLOB NULL,
                queued_at DATETIME(6) NOT NULL,
                granted_at DATETIME(6) NULL,
                expires_at DATETIME(6) NOT NULL,
                UNIQUE KEY entries_owner (owner),
                KEY entries_key_id (k, id)
            ) ENGINE=InnoDB",
            t.entries
        ),
        format!(
            "INSERT IGNORE INTO {} (version, applied_at) VALUES ({VERSION}, UTC_TIMESTAMP(6))",
            t.migrations
        ),
    ]
}
