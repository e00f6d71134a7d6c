//! Claims by dimension set on PostgreSQL, as SQLite's pending index does them in memory.
//!
//! A pending task with dimensions is indexed under its set (queue and dimensions, hashed).
//! Each set is filed once, under the alternatives of one required value (its anchor: the
//! one with the fewest sets filed when the set appeared), so a worker looks only at the sets
//! filed under values it has, then takes each set's tasks in line order. A trigger files a
//! set when a task becomes pending in it; the due loop forgets sets with nothing pending. A
//! set is forgotten only under an exclusive advisory lock that every filer holds shared to
//! its commit, so a set is never forgotten under a task just made pending in it.

use super::PgStore;
use crate::StoreError;

/// The functions, tables, trigger and indexes (PostgreSQL migration 18).
pub(crate) const MIGRATION: &str = r#"
-- The set a task's dimensions put it in: its queue and dimensions, hashed. Declared
-- immutable for the index: convert_to to the database's own UTF-8 changes nothing.
CREATE FUNCTION shoal_dimension_set(queue TEXT, dimensions JSONB) RETURNS BYTEA
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT sha256(convert_to(queue || E'\n' || dimensions::text, 'UTF8')) $$;

-- Dimensions::matched_by: every value of every key the task requires is among the
-- worker's, by one of its `|` alternatives.
CREATE FUNCTION shoal_dimensions_match(required JSONB, worker JSONB) RETURNS BOOLEAN
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT required IS NULL OR NOT EXISTS (
        SELECT 1 FROM jsonb_each(required) AS wanted(key, vals),
            jsonb_array_elements_text(wanted.vals) AS one(value)
        WHERE NOT coalesce((worker -> wanted.key) ?| string_to_array(one.value, '|'), false)) $$;

-- The advisory lock (second half; the first is 21320) guarding a set's existence.
CREATE FUNCTION shoal_set_lock(set_hash BYTEA) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (get_byte(set_hash, 0) << 24) | (get_byte(set_hash, 1) << 16)
        | (get_byte(set_hash, 2) << 8) | get_byte(set_hash, 3) $$;

CREATE TABLE dimension_sets (
    set_hash      BYTEA PRIMARY KEY,
    task_queue_id TEXT NOT NULL,
    dimensions    JSONB NOT NULL,
    anchor_key    TEXT NOT NULL,
    anchor_values TEXT[] NOT NULL
);
CREATE TABLE dimension_anchors (
    task_queue_id TEXT NOT NULL,
    key           TEXT NOT NULL,
    value         TEXT NOT NULL,
    set_hash      BYTEA NOT NULL,
    PRIMARY KEY (task_queue_id, key, value, set_hash)
);

-- Files the set of a task made pending, unless it is filed; the shared lock is held to the
-- commit, so the set is not forgotten before the task is seen pending in it.
CREATE FUNCTION shoal_file_dimension_set(queue TEXT, dims JSONB) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    h BYTEA := shoal_dimension_set(queue, dims);
    required RECORD;
    alternative TEXT;
    filed BIGINT;
    fewest BIGINT;
    anchor TEXT;
    alternatives TEXT[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(21320, shoal_set_lock(h));
    IF EXISTS (SELECT 1 FROM dimension_sets WHERE set_hash = h) THEN
        RETURN;
    END IF;
    -- Each value counted by its own index lookup (at most 1000 entries each).
    FOR required IN SELECT wanted.key, string_to_array(one.value, '|') AS alternatives
            FROM jsonb_each(dims) AS wanted(key, vals), jsonb_array_elements_text(wanted.vals) AS one(value)
            ORDER BY wanted.key, one.value LOOP
        filed := 0;
        FOREACH alternative IN ARRAY required.alternatives LOOP
            filed := filed + (SELECT count(*) FROM (SELECT 1 FROM dimension_anchors AS a
                WHERE a.task_queue_id = queue AND a.key = required.key AND a.value = alternative LIMIT 1000) AS f);
        END LOOP;
        IF fewest IS NULL OR filed < fewest THEN
            fewest := filed;
            anchor := required.key;
            alternatives := required.alternatives;
        END IF;
    END LOOP;
    IF anchor IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO dimension_sets VALUES (h, queue, dims, anchor, alternatives) ON CONFLICT DO NOTHING;
    IF FOUND THEN
        INSERT INTO dimension_anchors SELECT queue, anchor, v, h FROM unnest(alternatives) AS v
            ON CONFLICT DO NOTHING;
    END IF;
END $$;

-- The queue id in the default collation, as the anchors are indexed (tasks' is "C").
CREATE FUNCTION shoal_file_pending_task() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    PERFORM shoal_file_dimension_set(NEW.task_queue_id COLLATE "default", NEW.dimensions);
    RETURN NEW;
END $$;
CREATE TRIGGER tasks_file_inserted BEFORE INSERT ON tasks FOR EACH ROW
    WHEN (NEW.state = 'pending' AND NEW.dimensions IS NOT NULL)
    EXECUTE FUNCTION shoal_file_pending_task();
CREATE TRIGGER tasks_file_updated BEFORE UPDATE ON tasks FOR EACH ROW
    WHEN (NEW.state = 'pending' AND NEW.dimensions IS NOT NULL
        AND (OLD.state <> 'pending' OR OLD.dimensions IS DISTINCT FROM NEW.dimensions))
    EXECUTE FUNCTION shoal_file_pending_task();

-- Each pending task is in one of these: those requiring nothing, in line order per queue;
-- the others in line order per set.
DROP INDEX tasks_pending;
CREATE INDEX tasks_pending_free ON tasks (task_queue_id, priority_rank, pending_seq)
    WHERE state = 'pending' AND dimensions IS NULL;
CREATE INDEX tasks_pending_set ON tasks (shoal_dimension_set(task_queue_id, dimensions), priority_rank, pending_seq)
    WHERE state = 'pending' AND dimensions IS NOT NULL;
SELECT shoal_file_dimension_set(task_queue_id COLLATE "default", dimensions)
    FROM (SELECT DISTINCT task_queue_id, dimensions FROM tasks WHERE state = 'pending' AND dimensions IS NOT NULL) AS s;

-- The ids of up to `wanted` pending tasks of `queue` that a worker `offered` these dimensions
-- can take, locked, in line order across the tasks requiring nothing and the sets it
-- matches; those another transaction holds are passed over, and so are `excluding`.
-- Candidates are read without locks, a round at a time, then locked; a round that lost some
-- to other claims reads on past them.
CREATE FUNCTION shoal_claimable(queue TEXT, wanted BIGINT, offered JSONB, excluding TEXT[])
    RETURNS SETOF TEXT LANGUAGE plpgsql AS $$
DECLARE
    sets BYTEA[];
    got TEXT[] := '{}';
    seen TEXT[] := excluding;
    batch TEXT[];
    locked TEXT[];
    need BIGINT;
BEGIN
    -- Each value the worker has looked up by the index (OFFSET 0 keeps the planner, which
    -- guesses 100 rows per jsonb function, from reading every anchor of the queue instead).
    SELECT coalesce(array_agg(DISTINCT s.set_hash), '{}') INTO sets
        FROM jsonb_each(offered) AS have(key, vals), jsonb_array_elements_text(have.vals) AS one(value),
            LATERAL (SELECT a.set_hash FROM dimension_anchors AS a
                WHERE a.task_queue_id = queue AND a.key = have.key AND a.value = one.value OFFSET 0) AS a,
            dimension_sets AS s
        WHERE s.set_hash = a.set_hash AND shoal_dimensions_match(s.dimensions, offered);
    LOOP
        need := wanted - cardinality(got);
        SELECT array_agg(c.task_id ORDER BY c.priority_rank, c.pending_seq) INTO batch FROM (
            SELECT u.task_id, u.priority_rank, u.pending_seq FROM (
                (SELECT t.task_id, t.priority_rank, t.pending_seq FROM tasks AS t
                    WHERE t.task_queue_id = queue AND t.state = 'pending' AND t.dimensions IS NULL
                    AND t.task_id <> ALL (seen)
                    ORDER BY t.priority_rank, t.pending_seq LIMIT need)
                UNION ALL
                SELECT f.task_id, f.priority_rank, f.pending_seq FROM unnest(sets) AS s(h),
                    LATERAL (SELECT t.task_id, t.priority_rank, t.pending_seq FROM tasks AS t
                        WHERE shoal_dimension_set(t.task_queue_id, t.dimensions) = s.h
                        AND t.state = 'pending' AND t.dimensions IS NOT NULL AND t.task_id <> ALL (seen)
                        ORDER BY t.priority_rank, t.pending_seq LIMIT need) AS f
            ) AS u ORDER BY u.priority_rank, u.pending_seq LIMIT need) AS c;
        EXIT WHEN batch IS NULL;
        seen := seen || batch;
        SELECT coalesce(array_agg(l.task_id), '{}') INTO locked FROM (
            SELECT t.task_id FROM tasks AS t
            WHERE t.task_id = ANY (batch) AND t.task_queue_id = queue AND t.state = 'pending'
                AND shoal_dimensions_match(t.dimensions, offered)
            FOR UPDATE SKIP LOCKED) AS l;
        got := got || locked;
        EXIT WHEN cardinality(got) >= wanted OR cardinality(batch) < need;
    END LOOP;
    RETURN QUERY SELECT unnest(got);
END $$;

-- Forgets up to `lim` sets after `after` (in hash order) with nothing pending; answers the
-- last set looked at, NULL at the end.
CREATE FUNCTION shoal_forget_idle_dimension_sets(after BYTEA, lim INTEGER) RETURNS BYTEA
    LANGUAGE plpgsql AS $$
DECLARE
    s RECORD;
    last BYTEA;
BEGIN
    FOR s IN SELECT d.set_hash, d.task_queue_id, d.anchor_key, d.anchor_values FROM dimension_sets AS d
            WHERE d.set_hash > after ORDER BY d.set_hash LIMIT lim LOOP
        last := s.set_hash;
        CONTINUE WHEN EXISTS (SELECT 1 FROM tasks AS t
            WHERE shoal_dimension_set(t.task_queue_id, t.dimensions) = s.set_hash
            AND t.state = 'pending' AND t.dimensions IS NOT NULL);
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(21320, shoal_set_lock(s.set_hash));
        -- A snapshot taken after the lock: a task made pending in the set before it has
        -- committed, and is seen here.
        DELETE FROM dimension_sets AS d WHERE d.set_hash = s.set_hash AND NOT EXISTS (SELECT 1 FROM tasks AS t
            WHERE shoal_dimension_set(t.task_queue_id, t.dimensions) = s.set_hash
            AND t.state = 'pending' AND t.dimensions IS NOT NULL);
        IF FOUND THEN
            DELETE FROM dimension_anchors AS a WHERE a.task_queue_id = s.task_queue_id
                AND a.key = s.anchor_key AND a.value = ANY (s.anchor_values) AND a.set_hash = s.set_hash;
        END IF;
    END LOOP;
    RETURN last;
END $$;
"#;

/// The pending tasks of queue `$1` a worker having `$3` (JSON) can take, at most `$2`, in
/// line order (priority, then arrival), locked; those other transactions hold are skipped
/// rather than waited for. `excluding`: not the tasks of `$4` either (those this transaction
/// locked already, which `SKIP LOCKED` would not skip). `constrained`: whether the worker
/// has dimensions; one without can take only tasks requiring nothing, found by one scan, and
/// its query takes no `$3` (the excluded ids are then `$3`).
pub(crate) fn claimable(excluding: bool, constrained: bool) -> &'static str {
    static SQL: std::sync::LazyLock<[String; 4]> = std::sync::LazyLock::new(|| {
        [claimable_sql(false, false), claimable_sql(true, false), claimable_sql(false, true), claimable_sql(true, true)]
    });
    &SQL[usize::from(excluding) + 2 * usize::from(constrained)]
}

fn claimable_sql(excluding: bool, constrained: bool) -> String {
    use crate::postgres::row::TASK_COLUMNS;
    if constrained {
        let excluded = if excluding { "$4" } else { "'{}'::text[]" };
        format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id IN \
             (SELECT shoal_claimable($1, $2, $3::text::jsonb, {excluded})) ORDER BY priority_rank, pending_seq"
        )
    } else {
        format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_queue_id = $1 AND state = 'pending' \
             AND dimensions IS NULL {}ORDER BY priority_rank, pending_seq LIMIT $2 FOR UPDATE SKIP LOCKED",
            if excluding { "AND NOT task_id = ANY($3) " } else { "" }
        )
    }
}

impl PgStore {
    /// Forgets up to `limit` dimension sets with nothing pending, going on from where the last
    /// call stopped (from the start once it reached the end).
    pub(crate) async fn forget_idle_dimension_sets(&self, limit: usize) -> Result<(), StoreError> {
        let after = self.inner.sets_swept.lock().map_err(|_| StoreError::Internal("poisoned".into()))?.clone();
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let last: Option<Vec<u8>> = self
            .blocking("forgetting dimension sets", move |inner| {
                let mut conn = inner.pool.get()?;
                let row =
                    conn.client.query_one("SELECT shoal_forget_idle_dimension_sets($1, $2)", &[&after, &limit])?;
                Ok(row.get(0))
            })
            .await?;
        *self.inner.sets_swept.lock().map_err(|_| StoreError::Internal("poisoned".into()))? = last.unwrap_or_default();
        Ok(())
    }
}
