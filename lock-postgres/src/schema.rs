//! The tables and functions in the lock schema, created on first connect.
//!
//! One table, `entries`, is every queue: a row per holder or waiter of a
//! key, in arrival order (`id`). Who is granted follows distlock-core's one rule
//! ([`distlock_core::raw::blockers`]) over the live rows ahead: a writer (a
//! mutex, an election) when none is ahead, a reader when no writer is
//! ahead, a permit when fewer than its limit are ahead. Rows carry their
//! own expiry, judged by the server's `clock_timestamp()` (never `now()`,
//! which is the start of the transaction), so a dead client's rows are
//! skipped and removed once their lease runs out.
//!
//! Each grant attempt is one call of `acquire`, a PL/pgSQL function that
//! serialises the attempts on one key with a transaction advisory lock
//! (released at commit, so nothing depends on the session: the layout works
//! behind PgBouncer in transaction mode) and takes the fencing token from
//! the `tokens` sequence in the same transaction. Every statement inside a
//! volatile function takes a fresh snapshot, so it sees what the attempts
//! before it committed.
//!
//! Changes that can let a waiter in (a release, a cancelled wait, a removed
//! expired row) call `hand_over`, which first removes the key's expired
//! rows, then applies the same grant rule to the rows left and grants the
//! waiters it now admits in that same
//! transaction, each with its token from the sequence and the lease its
//! queue entry carries: a hand-off is one durable commit, the releaser's.
//! It notifies the schema's wake channel with exactly those waiters,
//! `owner:token`, so the granted waiter learns of its grant without a
//! query and every other listener ignores the payload (version 3). An
//! election candidate's entry carries no lease: it is named by its owner
//! id alone and grants itself, publishing its value. What observers watch
//! (a proclaimed value, a leader granted or gone, an operator's eviction)
//! `pg_notify`s the key on the schema's key channel.
//!
//! Whatever deletes rows of a key takes the key's transaction advisory lock
//! first, as `acquire` does, in the same order (lock, then rows): so `hand_over`
//! sees every queue entry that an `acquire` racing with it has committed.
//!
//! An expired row is removed only if no transaction holds a lock on it
//! (`FOR UPDATE SKIP LOCKED`): a fenced transaction that checked its fence
//! in time holds its holder's row `FOR KEY SHARE` until it ends, and that
//! row, expired or not, stays in the queue and keeps everyone behind it
//! waiting until then. So no grant passes an open fenced transaction, and
//! no lock statement ever waits for one while holding the key's lock. What
//! still waits for a lock (the key's, behind another attempt; a row that a
//! release or a break deletes) gives up after `lock_timeout`, one second,
//! set on every function, so that one stuck transaction cannot hold up the
//! statements pipelined behind it on a shared connection.
//!
//! A waiting look answers the tokens sequence's last value: a grant made
//! for the entry after that look has a higher token, so a waiter takes a
//! notified grant only above it (version 4). A lower one named an earlier
//! entry of the same owner id, granted and then lost while its waiter could
//! not hear of it.

/// The version the code below creates; recorded in `migrations`.
pub(crate) const VERSION: i32 = 4;

/// The key notification channel of `schema`: payload a key.
pub(crate) fn channel(schema: &str) -> String {
    format!("distlock_{schema}")
}

/// The wake channel of `schema`: payload the admitted waiters, `owner` or
/// `owner:token` when granted.
pub(crate) fn wake_channel(schema: &str) -> String {
    format!("distlockw_{schema}")
}

/// The whole migration, run inside [`migrate`](crate::migrate::migrate)'s transaction.
pub(crate) fn migration_sql(schema: &str) -> String {
    MIGRATION
        .replace("{s}", schema)
        .replace("{channel}", &channel(schema))
        .replace("{wake_channel}", &wake_channel(schema))
        .replace("{version}", &VERSION.to_string())
}

const MIGRATION: &str = r#"
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.migrations (
    version int PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE SEQUENCE IF NOT EXISTS {s}.tokens;
CREATE TABLE IF NOT EXISTS {s}.entries (
    id bigserial PRIMARY KEY,
    key text NOT NULL,
    owner uuid NOT NULL UNIQUE,
    access text NOT NULL CHECK (access IN ('write', 'read', 'permit')),
    permits int,
    granted boolean NOT NULL DEFAULT false,
    token bigint UNIQUE,
    holder text,
    value bytea,
    version bigint NOT NULL DEFAULT 0,
    queued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    granted_at timestamptz,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_key_id ON {s}.entries (key, id);

ALTER TABLE {s}.entries ADD COLUMN IF NOT EXISTS ttl_ms bigint;

-- Removes p_key's expired rows, except those a transaction holds a lock
-- on (a fenced transaction that checked in time keeps its holder's row,
-- and with it the lock, until it ends). Returns how many it removed.
CREATE OR REPLACE FUNCTION {s}.remove_expired(p_key text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    removed bigint;
BEGIN
    DELETE FROM {s}.entries e WHERE e.id IN (
        SELECT x.id FROM {s}.entries x
         WHERE x.key = p_key AND x.expires_at <= clock_timestamp()
           FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$fn$;

-- Hands p_key over to the waiters that the grant rule now admits (a writer
-- with nothing ahead, a reader with no writer ahead, a permit with fewer
-- than its limit ahead), in queue order. Every row left after removing
-- the expired ones counts, so an expired grant kept by an open fenced
-- transaction keeps its place. A waiter that gave its lease
-- (ttl_ms) is granted here, with its token from the sequence, and its
-- notification names it with the token: `owner:token`. One without (an
-- election candidate, which publishes its value with its own grant) is
-- named by its owner id alone and looks again. At most 100 per
-- notification. Returns how many it granted: the caller's commit must then
-- wait for the WAL flush.
CREATE OR REPLACE FUNCTION {s}.hand_over(p_key text)
RETURNS int
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1s' AS $fn$
DECLARE
    w record;
    granted_token bigint;
    names text[] := '{}';
    granted_count int := 0;
BEGIN
    PERFORM {s}.remove_expired(p_key);
    FOR w IN
        SELECT a.id, a.owner, a.ttl_ms
          FROM (SELECT e.id, e.owner, e.granted, e.access, e.permits, e.ttl_ms,
                       count(*) OVER ahead AS n_ahead,
                       count(*) FILTER (WHERE e.access = 'write') OVER ahead AS writers_ahead
                  FROM {s}.entries e
                 WHERE e.key = p_key
                WINDOW ahead AS (ORDER BY e.id ROWS BETWEEN UNBOUNDED PRECEDING
                                                   AND 1 PRECEDING)) a
         WHERE NOT a.granted
           AND CASE a.access
                 WHEN 'write' THEN a.n_ahead = 0
                 WHEN 'read' THEN a.writers_ahead = 0
                 ELSE a.n_ahead < a.permits
               END
         ORDER BY a.id
    LOOP
        IF w.ttl_ms IS NULL THEN
            names := names || w.owner::text;
        ELSE
            granted_token := nextval('{s}.tokens');
            UPDATE {s}.entries e SET granted = true, token = granted_token,
                   granted_at = clock_timestamp(),
                   expires_at = clock_timestamp() + w.ttl_ms * interval '1 millisecond'
             WHERE e.id = w.id;
            names := names || (w.owner::text || ':' || granted_token);
            granted_count := granted_count + 1;
        END IF;
        IF cardinality(names) = 100 THEN
            PERFORM pg_notify('{wake_channel}', array_to_string(names, ','));
            names := '{}';
        END IF;
    END LOOP;
    IF cardinality(names) > 0 THEN
        PERFORM pg_notify('{wake_channel}', array_to_string(names, ','));
    END IF;
    RETURN granted_count;
END
$fn$;

-- Kept for callers of version 2: hands p_key over.
CREATE OR REPLACE FUNCTION {s}.wake(p_key text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    PERFORM {s}.hand_over(p_key);
END
$fn$;

CREATE OR REPLACE FUNCTION {s}.acquire(
    p_key text, p_owner uuid, p_access text, p_permits int, p_ttl_ms bigint,
    p_holder text, p_value bytea, p_queue boolean,
    OUT outcome text, OUT token bigint, OUT detail bigint)
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1s' AS $fn$
DECLARE
    my_id bigint;
    my_granted boolean;
    my_token bigint;
    removed bigint;
    other_limit int;
    blocked boolean;
    handed_over int := 0;
    lease interval := p_ttl_ms * interval '1 millisecond';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('distlock {s} ' || p_key, 0));
    removed := {s}.remove_expired(p_key);
    IF removed > 0 THEN
        handed_over := {s}.hand_over(p_key);
    END IF;
    SELECT e.id, e.granted, e.token INTO my_id, my_granted, my_token
        FROM {s}.entries e WHERE e.owner = p_owner;
    IF my_granted THEN
        -- A retry after a lost answer: the lease restarts now, so that it
        -- never ends before the retry's sender thinks it does.
        UPDATE {s}.entries e SET expires_at = clock_timestamp() + lease WHERE e.id = my_id;
        outcome := 'granted';
        token := my_token;
        RETURN;
    END IF;
    IF p_access = 'permit' THEN
        SELECT e.permits INTO other_limit FROM {s}.entries e
            WHERE e.key = p_key AND e.access = 'permit' AND e.permits <> p_permits
              AND (my_id IS NULL OR e.id < my_id)
            ORDER BY e.id LIMIT 1;
        IF other_limit IS NOT NULL THEN
            DELETE FROM {s}.entries e WHERE e.owner = p_owner;
            outcome := 'limit';
            detail := other_limit;
            RETURN;
        END IF;
        blocked := (SELECT count(*) FROM {s}.entries e
            WHERE e.key = p_key AND (my_id IS NULL OR e.id < my_id)) >= p_permits;
    ELSIF p_access = 'read' THEN
        blocked := EXISTS (SELECT 1 FROM {s}.entries e
            WHERE e.key = p_key AND e.access = 'write' AND (my_id IS NULL OR e.id < my_id));
    ELSE
        blocked := EXISTS (SELECT 1 FROM {s}.entries e
            WHERE e.key = p_key AND (my_id IS NULL OR e.id < my_id));
    END IF;
    IF NOT blocked THEN
        token := nextval('{s}.tokens');
        IF my_id IS NULL THEN
            INSERT INTO {s}.entries AS e (key, owner, access, permits, granted, token, holder,
                                          value, granted_at, expires_at)
            VALUES (p_key, p_owner, p_access, p_permits, true, token, p_holder, p_value,
                    clock_timestamp(), clock_timestamp() + lease);
        ELSE
            UPDATE {s}.entries e SET granted = true, token = acquire.token, holder = p_holder,
                   value = p_value, granted_at = clock_timestamp(),
                   expires_at = clock_timestamp() + lease
             WHERE e.id = my_id;
        END IF;
        IF p_value IS NOT NULL THEN
            PERFORM pg_notify('{channel}', p_key);
        END IF;
        outcome := 'granted';
        RETURN;
    END IF;
    -- Nothing granted: losing this transaction in a crash loses no grant
    -- (the waiter queues again on its next look), so its commit need not
    -- wait for the WAL flush, nor hold the key's lock through one.
    IF handed_over = 0 THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF p_queue THEN
        IF my_id IS NULL THEN
            -- The lease goes with the entry, so that a release can grant it
            -- (an election candidate publishes its value with its own grant).
            INSERT INTO {s}.entries AS e (key, owner, access, permits, holder, expires_at,
                                          ttl_ms)
            VALUES (p_key, p_owner, p_access, p_permits, p_holder, clock_timestamp() + lease,
                    CASE WHEN p_value IS NULL THEN p_ttl_ms END)
            RETURNING e.id INTO my_id;
        ELSE
            UPDATE {s}.entries e SET expires_at = clock_timestamp() + lease WHERE e.id = my_id;
        END IF;
    END IF;
    -- How long until the first grant ahead runs out: the longest a waiter
    -- needs to sleep if no notification reaches it (zero or less: it ran
    -- out, but an open fenced transaction keeps it).
    SELECT ceil(extract(epoch FROM min(e.expires_at) - clock_timestamp()) * 1000)::bigint
      INTO detail FROM {s}.entries e
     WHERE e.key = p_key AND e.granted AND (my_id IS NULL OR e.id < my_id);
    -- The last token taken: a grant of this entry after this look gets a
    -- higher one, so a notified grant at or below it is an earlier
    -- entry's.
    -- (pg_sequence_last_value needs only the USAGE that nextval needs.)
    token := coalesce(pg_sequence_last_value('{s}.tokens'::regclass), 0);
    outcome := 'waiting';
END
$fn$;

CREATE OR REPLACE FUNCTION {s}.release(p_owner uuid, OUT was_live boolean)
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1s' AS $fn$
DECLARE
    released_key text;
    had_value boolean;
BEGIN
    SELECT e.key INTO released_key FROM {s}.entries e WHERE e.owner = p_owner;
    IF released_key IS NULL THEN
        was_live := false;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('distlock {s} ' || released_key, 0));
    DELETE FROM {s}.entries e WHERE e.owner = p_owner
        RETURNING e.granted AND e.expires_at > clock_timestamp(), e.value IS NOT NULL
        INTO was_live, had_value;
    IF FOUND THEN
        IF {s}.hand_over(released_key) = 0 THEN
            -- Nobody granted: a release lost in a crash leaves the row to
            -- expire after its TTL, which is safe, and the next grant's
            -- commit flushes this one too. So it need not wait for the
            -- flush. A release that granted the next waiter must.
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        IF had_value THEN
            -- A leader is gone: its observers look again.
            PERFORM pg_notify('{channel}', released_key);
        END IF;
    END IF;
    was_live := coalesce(was_live, false);
END
$fn$;

CREATE OR REPLACE FUNCTION {s}.proclaim(p_owner uuid, p_value bytea, OUT was_live boolean)
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1s' AS $fn$
DECLARE
    proclaimed_key text;
BEGIN
    UPDATE {s}.entries e SET value = p_value, version = e.version + 1
     WHERE e.owner = p_owner AND e.granted AND e.expires_at > clock_timestamp()
       AND e.value IS DISTINCT FROM p_value
    RETURNING e.key INTO proclaimed_key;
    IF proclaimed_key IS NOT NULL THEN
        PERFORM pg_notify('{channel}', proclaimed_key);
        was_live := true;
        RETURN;
    END IF;
    was_live := EXISTS (SELECT 1 FROM {s}.entries e
        WHERE e.owner = p_owner AND e.granted AND e.expires_at > clock_timestamp());
END
$fn$;

CREATE OR REPLACE FUNCTION {s}.force_release(p_key text)
RETURNS SETOF {s}.entries
LANGUAGE plpgsql VOLATILE SET lock_timeout = '1s' AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('distlock {s} ' || p_key, 0));
    RETURN QUERY WITH d AS (
        DELETE FROM {s}.entries e WHERE e.key = p_key AND e.granted RETURNING e.*
    ) SELECT * FROM d;
    IF FOUND THEN
        PERFORM {s}.hand_over(p_key);
        PERFORM pg_notify('{channel}', p_key);
    END IF;
END
$fn$;

INSERT INTO {s}.migrations (version) VALUES ({version}) ON CONFLICT DO NOTHING;
"#;
