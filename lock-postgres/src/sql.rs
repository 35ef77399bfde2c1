//! The statements the backend sends, with the schema filled in.
//!
//! Each is sent unnamed with its parameter types given (`query_typed`): one
//! round trip, and no prepared statement left in the session, so nothing
//! breaks behind a pooler in transaction mode.

/// The statements of one schema.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) acquire: String,
    pub(crate) release: String,
    pub(crate) renew: String,
    pub(crate) proclaim: String,
    pub(crate) force_release: String,
    pub(crate) entries_of: String,
    pub(crate) keys_under: String,
    pub(crate) fence: String,
}

/// Columns an operator's view reads from an entry, in this order.
const VIEW: &str = "e.granted, e.token, e.holder, e.value, \
    extract(epoch FROM e.granted_at)::float8, \
    greatest(0, extract(epoch FROM e.expires_at - clock_timestamp()) * 1000)::float8";

impl Sql {
    /// The statements for the tables in `schema`.
    pub(crate) fn new(schema: &str) -> Self {
        let s = schema;
        Sql {
            acquire: format!(
                "SELECT outcome, token, detail FROM {s}.acquire($1, $2::text::uuid, $3, $4, $5, $6, $7, $8)"
            ),
            release: format!("SELECT {s}.release($1::text::uuid)"),
            renew: format!(
                "WITH renewed AS (
                     UPDATE {s}.entries e
                        SET expires_at = clock_timestamp() + $2::bigint * interval '1 millisecond'
                      WHERE e.owner = $1::text::uuid AND e.granted
                        AND e.expires_at > clock_timestamp()
                     RETURNING 1)
                 SELECT (SELECT count(*) FROM renewed) > 0,
                        EXISTS (SELECT 1 FROM {s}.entries e WHERE e.owner = $1::text::uuid)"
            ),
            proclaim: format!("SELECT {s}.proclaim($1::text::uuid, $2)"),
            force_release: format!(
                "SELECT e.key, {VIEW} FROM {s}.force_release($1) e ORDER BY e.id"
            ),
            entries_of: format!(
                "SELECT e.key, {VIEW} FROM {s}.entries e
                  WHERE e.key = $1 AND e.expires_at > clock_timestamp() ORDER BY e.id"
            ),
            keys_under: format!(
                "SELECT e.key, max(e.token) FILTER (WHERE e.granted),
                        count(*) FILTER (WHERE NOT e.granted)
                   FROM {s}.entries e
                  WHERE e.expires_at > clock_timestamp() AND starts_with(e.key, $1)
                  GROUP BY e.key"
            ),
            fence: format!(
                "SELECT set_config('idle_in_transaction_session_timeout', $3, true)
                   FROM {s}.entries e
                  WHERE e.key = $1 AND e.token = $2 AND e.granted
                    AND e.expires_at > clock_timestamp()
                  FOR KEY SHARE"
            ),
        }
    }
}
