//! Creating or upgrading the lock schema on connect, while other clients
//! may already be using its tables.
//!
//! Concurrent first connections serialise on a transaction advisory lock,
//! and each reads the version again once it holds it: the script's
//! `ALTER TABLE` takes the table's exclusive lock even when it changes
//! nothing, and a client that ran it again behind the first one would only
//! stall the lock traffic that had started meanwhile.
//!
//! The one that does migrate takes `entries`' exclusive lock first, before
//! any statement of the script takes a weaker one: a transaction that
//! holds a weaker table lock while it waits for a stronger one closes a
//! cycle with any lock function that read the table and then waits to
//! write it (PostgreSQL then aborts one of them, `deadlock detected`). It
//! waits for table locks for [`LOCK_WAIT`] at most, far less than the lock
//! functions' one second `lock_timeout`, so the lock traffic queued behind
//! it never times out because of it. A migration that gave way (its lock
//! wait ran out, or it was chosen as a deadlock victim nevertheless) rolls
//! back and tries again after a jittered pause, a few times, within the
//! connect timeout.

use std::time::Duration;

use distlock_core::{Error, Result};
use tokio::time::Instant;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::config::PostgresConfig;
use crate::errors::from_pg;
use crate::schema::{VERSION, migration_sql};

/// Longest wait of a migration for a table lock: long enough for the lock
/// functions running on the table to end, short enough that what queues
/// behind the migration's request stays well inside its own one second.
const LOCK_WAIT: &str = "200ms";
/// Most migration attempts of one connect.
const ATTEMPTS: u32 = 8;
/// The pause after the first attempt that gave way; it doubles after each.
const FIRST_PAUSE: Duration = Duration::from_millis(25);

/// Creates the schema's objects unless version [`VERSION`] is recorded.
/// Every statement is idempotent (`IF NOT EXISTS`, `CREATE OR REPLACE`), so
/// the same script also upgrades an older version in place.
///
/// The migration is one transaction of several requests, so it runs on a
/// connection of its own, never on a pooled one that other requests share;
/// a cancelled migration closes that connection, which rolls it back.
pub(crate) async fn migrate(client: &Client, config: &PostgresConfig) -> Result<()> {
    let schema = &config.schema;
    if current_version(client, schema).await? >= VERSION {
        return Ok(());
    }
    let deadline = Instant::now() + config.connect_timeout;
    let own = crate::connect::open_client(config).await?;
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        let failed = match migrate_once(&own, schema).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let wait = jittered(pause);
        if attempt == ATTEMPTS || !gave_way(&failed) || Instant::now() + wait >= deadline {
            return Err(failed);
        }
        tracing::debug!(
            backend = "postgres",
            schema = %schema,
            attempt,
            error = %failed,
            "the lock schema migration gave way to other transactions; trying again"
        );
        own.batch_execute("ROLLBACK")
            .await
            .map_err(|e| from_pg(e, "roll back a migration that gave way"))?;
        tokio::time::sleep(wait).await;
        pause *= 2;
        attempt += 1;
    }
}

/// One migration transaction, committed unless it fails.
async fn migrate_once(own: &Client, schema: &str) -> Result<()> {
    let context = format!("create the lock tables in schema {schema}");
    let pg = |e| from_pg(e, &context);
    own.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended('distlock migration {schema}', 0)); \
         SET LOCAL lock_timeout = '{LOCK_WAIT}'"
    ))
    .await
    .map_err(pg)?;
    if current_version(own, schema).await? < VERSION {
        own.batch_execute(&format!(
            "{}{}",
            lock_entries_sql(schema),
            migration_sql(schema)
        ))
        .await
        .map_err(pg)?;
    }
    own.batch_execute("COMMIT").await.map_err(pg)
}

/// Takes `entries`' exclusive lock, if the table exists, before anything
/// else of the migration locks it (see the module docs).
fn lock_entries_sql(schema: &str) -> String {
    format!(
        "DO $lock$ BEGIN \
           IF to_regclass(quote_ident('{schema}') || '.entries') IS NOT NULL THEN \
             LOCK TABLE {schema}.entries IN ACCESS EXCLUSIVE MODE; \
           END IF; \
         END $lock$;\n"
    )
}

/// Whether `e` is a migration that gave way to other transactions: chosen
/// as a deadlock victim, or out of its lock wait. Trying again is safe:
/// the transaction was rolled back.
fn gave_way(e: &Error) -> bool {
    let code = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<tokio_postgres::Error>())
        .and_then(tokio_postgres::Error::code);
    code == Some(&SqlState::T_R_DEADLOCK_DETECTED) || code == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

/// `pause` scaled by a random factor in [0.5, 1.5), so that clients that
/// gave way together do not meet again at the same instant.
fn jittered(pause: Duration) -> Duration {
    // 53 random bits: a fraction in [0, 1) that an `f64` holds exactly.
    let random = uuid::Uuid::new_v4().as_u64_pair().0 >> 11;
    pause.mul_f64(0.5 + random as f64 / (1u64 << 53) as f64)
}

async fn current_version(client: &Client, schema: &str) -> Result<i32> {
    let context = format!("read the lock schema version of {schema}");
    let exists: bool = client
        .query_one(
            "SELECT to_regclass(quote_ident($1) || '.migrations') IS NOT NULL",
            &[&schema],
        )
        .await
        .map_err(|e| from_pg(e, &context))?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {schema}.migrations"),
            &[],
        )
        .await
        .map_err(|e| from_pg(e, &context))?;
    let version: i32 = row.get(0);
    if version > VERSION {
        return Err(Error::invalid_config(format!(
            "schema {schema} holds lock tables of version {version}, newer than this \
             distlock-postgres understands ({VERSION}); upgrade distlock-postgres"
        )));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_pause_stays_within_half_and_one_and_a_half_times() {
        let pause = Duration::from_millis(100);
        for _ in 0..1000 {
            let wait = jittered(pause);
            assert!(wait >= pause / 2 && wait < pause * 3 / 2, "{wait:?}");
        }
    }
}
