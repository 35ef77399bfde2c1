//! [`SqlFence`]: the SQL of fencing table rows, claim first.

use std::fmt;

use distlock_core::{FencingToken, TokenRangeError};

#[cfg(doc)]
use super::TokenScope;

/// A fencing token as SQL's `BIGINT` (`i64`), checked: a token past
/// `i64::MAX` is an error naming it, never a wrapped negative number that
/// every stale holder would beat.
pub fn sql_token(token: FencingToken) -> Result<i64, TokenRangeError> {
    token.to_i64()
}

/// A name that cannot be used as an SQL identifier here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidIdentifier {
    what: &'static str,
    name: String,
}

impl fmt::Display for InvalidIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} is not a plain SQL identifier: use ASCII letters, digits and '_' (not \
             starting with a digit), optionally schema-qualified with one '.'",
            self.what, self.name
        )
    }
}

impl std::error::Error for InvalidIdentifier {}

fn identifier(what: &'static str, name: &str, dotted: bool) -> Result<String, InvalidIdentifier> {
    let part_ok = |part: &str| {
        !part.is_empty()
            && !part.starts_with(|c: char| c.is_ascii_digit())
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = name.split('.').collect();
    let ok = parts.iter().all(|p| part_ok(p)) && (parts.len() == 1 || dotted && parts.len() == 2);
    if ok {
        Ok(name.to_owned())
    } else {
        Err(InvalidIdentifier {
            what,
            name: name.to_owned(),
        })
    }
}

/// The SQL of fencing rows of a table: a `fence BIGINT` column with the
/// highest token accepted for the row and a `fence_scope TEXT` column with
/// its [`TokenScope`].
///
/// A write under a lock is one transaction that **claims the row first**,
/// then reads and writes it:
///
/// ```text
/// BEGIN;
/// UPDATE accounts SET fence = $2, fence_scope = $3
///   WHERE id = $1 AND fence <= $2 AND (fence_scope = $3 OR fence_scope = '')
///   RETURNING *;                      -- no row: stale (or no such row); ROLLBACK
/// UPDATE accounts SET balance = ... WHERE id = $1;
/// COMMIT;
/// ```
///
/// with `$1` the row's id, `$2` the token as [`sql_token`] converts it and
/// `$3` the backend's [`TokenScope`]. The claim takes the row lock, so the
/// read in `RETURNING` and the write that follows see no other holder's
/// write; a newer holder's claim raised `fence` and refuses ours. An equal
/// token is the same holder and passes.
///
/// Do not read first and claim later (`SELECT`, compute, then `UPDATE …
/// WHERE fence <= $token`): after a `break` (or an expiry), the new holder
/// (token 6) can read the row before the old holder's (token 5) update
/// lands, and write after it. Both updates pass their checks (5 ≤ the fence
/// then, 6 ≥ 5 after), so the old holder's update is silently lost.
///
/// ```
/// use distlock::fence::SqlFence;
///
/// let fence = SqlFence::new("accounts").unwrap();
/// assert_eq!(
///     fence.claim(),
///     "UPDATE accounts SET fence = $2, fence_scope = $3 WHERE id = $1 AND fence <= $2 \
///      AND (fence_scope = $3 OR fence_scope = '') RETURNING *"
/// );
/// assert!(SqlFence::new("accounts; DROP TABLE x").is_err());
/// ```
#[derive(Debug, Clone)]
pub struct SqlFence {
    table: String,
    id: String,
}

impl SqlFence {
    /// The fence of `table` (optionally `schema.table`), whose rows are
    /// keyed by an `id` column.
    pub fn new(table: &str) -> Result<Self, InvalidIdentifier> {
        Ok(SqlFence {
            table: identifier("table", table, true)?,
            id: "id".to_owned(),
        })
    }

    /// Keys rows by `column` instead of `id`.
    pub fn with_id_column(mut self, column: &str) -> Result<Self, InvalidIdentifier> {
        self.id = identifier("id column", column, false)?;
        Ok(self)
    }

    /// Adds the fence columns to the table (Postgres syntax); new rows
    /// start at fence 0 and an empty scope, which the first claim takes.
    pub fn add_columns(&self) -> String {
        format!(
            "ALTER TABLE {} ADD COLUMN fence BIGINT NOT NULL DEFAULT 0, \
             ADD COLUMN fence_scope TEXT NOT NULL DEFAULT ''",
            self.table
        )
    }

    /// The claim: `$1` the row's id, `$2` the token ([`sql_token`]), `$3`
    /// the scope. Returns the row if the token is not stale, else no row.
    pub fn claim(&self) -> String {
        format!(
            "UPDATE {} SET fence = $2, fence_scope = $3 WHERE {} = $1 AND fence <= $2 \
             AND (fence_scope = $3 OR fence_scope = '') RETURNING *",
            self.table, self.id
        )
    }

    /// The switch to another lock service, for every row: `$1` the new
    /// scope. Only once no holder of the old service can still write.
    pub fn reset(&self) -> String {
        format!("UPDATE {} SET fence = 0, fence_scope = $1", self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_identifiers_are_checked_and_tokens_convert_checked() {
        assert!(SqlFence::new("app.accounts").is_ok());
        for bad in ["", "1t", "a b", "t;--", "a.b.c", "\"t\""] {
            let err = SqlFence::new(bad).unwrap_err();
            assert!(err.to_string().contains("table"), "{err}");
        }
        assert!(SqlFence::new("t").unwrap().with_id_column("a.b").is_err());
        let fence = SqlFence::new("t").unwrap().with_id_column("key").unwrap();
        assert!(fence.claim().contains("WHERE key = $1 AND fence <= $2"));
        assert_eq!(sql_token(FencingToken(42)), Ok(42));
        assert!(sql_token(FencingToken(u64::MAX)).is_err());
    }
}
