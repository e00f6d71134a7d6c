//! The PostgreSQL schema and its versioned migrations.
//!
//! Several servers may start at once against one database: migrations run in one
//! transaction holding a transaction-scoped advisory lock, so exactly one server applies
//! them and the others wait, then find nothing left to do.

use postgres::GenericClient;

use crate::StoreError;

/// Key of the advisory lock that serializes migrations (any constant unlikely to collide).
const MIGRATION_LOCK: i64 = 0x5_4841_4c00;

/// Migrations in order; entry `i` brings the schema from version `i` to `i + 1`. Never edit
/// a released entry: append a new one. Times are milliseconds since the epoch, as in SQLite.
pub(crate) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE tasks (
    task_id       TEXT COLLATE "C" PRIMARY KEY,
    task_queue_id TEXT COLLATE "C" NOT NULL,
    scheduler_id  TEXT NOT NULL,
    project_id    TEXT NOT NULL,
    task_group_id TEXT COLLATE "C" NOT NULL,
    priority      TEXT NOT NULL,     -- JSON: a name in quotes or a number
    priority_rank SMALLINT NOT NULL, -- claim order across priorities, ascending (engine rank)
    retries       INTEGER NOT NULL,
    retries_left  INTEGER NOT NULL,
    deadline      BIGINT NOT NULL,
    expires       BIGINT NOT NULL,
    requires      TEXT NOT NULL,
    dimensions    JSONB,             -- NULL when none
    routes        TEXT,              -- JSON array, NULL when none
    tags          TEXT,              -- JSON object, NULL when none
    runs          TEXT NOT NULL,     -- JSON array of runs
    state         TEXT NOT NULL,
    taken_until   BIGINT,            -- set only while the last run is running: the claim-expiry due time
    deadline_due  BIGINT,            -- the deadline while unresolved, else NULL: the deadline due time
    pending_seq   BIGINT,            -- claim order within a priority while pending
    definition    TEXT NOT NULL      -- the checked definition as served by task()
);
CREATE INDEX tasks_group ON tasks (task_group_id, task_id);
CREATE INDEX tasks_group_unresolved ON tasks (task_group_id) WHERE deadline_due IS NOT NULL;
CREATE INDEX tasks_taken_until ON tasks (taken_until) WHERE taken_until IS NOT NULL;
CREATE INDEX tasks_deadline_due ON tasks (deadline_due) WHERE deadline_due IS NOT NULL;
CREATE INDEX tasks_pending ON tasks (task_queue_id, priority_rank, pending_seq) WHERE state = 'pending';
CREATE INDEX tasks_running ON tasks (task_queue_id) WHERE state = 'running';
CREATE SEQUENCE tasks_pending_seq;

CREATE TABLE task_dependencies (
    required_task_id  TEXT COLLATE "C" NOT NULL,
    dependent_task_id TEXT COLLATE "C" NOT NULL,
    requires          TEXT NOT NULL,
    satisfied         BOOLEAN NOT NULL,
    PRIMARY KEY (required_task_id, dependent_task_id)
);
CREATE INDEX task_dependencies_unsatisfied ON task_dependencies (dependent_task_id) WHERE NOT satisfied;

CREATE TABLE task_groups (
    task_group_id TEXT COLLATE "C" PRIMARY KEY,
    scheduler_id  TEXT NOT NULL,
    expires       BIGINT NOT NULL,
    sealed        BIGINT
);

CREATE TABLE task_queues (
    task_queue_id    TEXT COLLATE "C" PRIMARY KEY,
    expires          BIGINT NOT NULL,
    last_date_active BIGINT NOT NULL,
    description      TEXT NOT NULL,
    stability        TEXT NOT NULL
);

CREATE TABLE artifacts (
    task_id  TEXT COLLATE "C" NOT NULL,
    run_id   INTEGER NOT NULL,
    name     TEXT COLLATE "C" NOT NULL,
    kind     TEXT NOT NULL,     -- JSON: storageType and its fields
    present  BOOLEAN NOT NULL,  -- false while a blob has not been uploaded
    expires  BIGINT NOT NULL,
    PRIMARY KEY (task_id, run_id, name)
);
CREATE INDEX artifacts_expires ON artifacts (expires);

-- One row per committed transaction's messages (see outbox/format.rs for the format).
CREATE TABLE outbox_batches (
    first_seq BIGINT PRIMARY KEY,
    last_seq  BIGINT NOT NULL,
    messages  TEXT NOT NULL
);
CREATE TABLE outbox_state (published BIGINT NOT NULL);
INSERT INTO outbox_state (published) VALUES (0);
"#,
    r#"
-- Writers stage their messages here, numbered by a sequence at the end of the transaction
-- (no lock held through the commit); one sequencing step at a time moves them, in number
-- order, to outbox_batches with gapless positions (see outbox.rs).
CREATE SEQUENCE outbox_ids;
CREATE TABLE outbox_pending (
    id       BIGINT PRIMARY KEY,
    count    INTEGER NOT NULL,
    messages TEXT NOT NULL
);
ALTER TABLE outbox_state
    ADD COLUMN sequenced_id BIGINT NOT NULL DEFAULT 0, -- highest staged id moved so far
    ADD COLUMN gap_id       BIGINT,                    -- a missing id the sequencer waits on
    ADD COLUMN gap_xmax     BIGINT;                    -- the snapshot xmax when it was first seen missing
"#,
    // 3: the task-graph scheduler (seed 000): a graph's counts of open and failed-for-good
    // tasks (its state follows from them), and each labelled task's rerun budget.
    r#"
CREATE TABLE task_graphs (
    task_graph_id TEXT COLLATE "C" PRIMARY KEY,
    scheduler_id  TEXT NOT NULL,
    routing       TEXT NOT NULL,
    open          INTEGER NOT NULL,  -- tasks not completed
    failed        INTEGER NOT NULL,  -- tasks failed with no reruns left
    metadata      TEXT NOT NULL,     -- JSON object
    tags          TEXT NOT NULL,     -- JSON object
    created       BIGINT NOT NULL
);
CREATE TABLE graph_tasks (
    task_id       TEXT COLLATE "C" PRIMARY KEY,
    task_graph_id TEXT COLLATE "C" NOT NULL,
    label         TEXT NOT NULL,
    requires      TEXT NOT NULL,     -- JSON array of labels
    reruns        INTEGER NOT NULL,
    reruns_left   INTEGER NOT NULL,
    failed        BOOLEAN NOT NULL,  -- failed with no reruns left, until run again
    submitted     TEXT NOT NULL,     -- the node as submitted (JSON), to recognize a repeat
    UNIQUE (task_graph_id, label)
);
"#,
    // 4: each staged row names the server that staged it and its tag there, so that server's
    // tail takes the messages from its memory instead of reading them back (outbox.rs).
    r#"
ALTER TABLE outbox_pending ADD COLUMN origin BIGINT, ADD COLUMN tag BIGINT;
ALTER TABLE outbox_batches ADD COLUMN origin BIGINT, ADD COLUMN tag BIGINT;
"#,
    // 5: a transaction's staged messages (a few kB of JSON) compressed by lz4 rather than
    // pglz, which took ~4% of the database's CPU under load. Sequencing moves the compressed
    // value into outbox_batches as it is. A server built without lz4 keeps pglz.
    r#"
DO $$
BEGIN
    ALTER TABLE outbox_pending ALTER COLUMN messages SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL has no lz4: staged messages stay compressed by pglz';
END
$$;
"#,
    // 6: fewer writes per task. Every task update changes indexed columns, so none is HOT and
    // each inserts into every index whose predicate the new version meets: tasks_running
    // cost one insertion per claim, and the running tasks are found through
    // tasks_taken_until instead (taken_until is set exactly while the last run runs). With
    // full pages each update's new version went to another page, which PostgreSQL logs as
    // a lock of the old version besides the update; half-full pages keep most on the page.
    r#"
DROP INDEX tasks_running;
ALTER TABLE tasks SET (fillfactor = 50);
"#,
    // 7: clients and roles (the Auth API), and the generation every change moves on so
    // servers know to reload them; the servers' shared signing token.
    r#"
CREATE TABLE auth_entities (
    kind TEXT NOT NULL,
    id   TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE TABLE auth_state (
    only_row      BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    generation    BIGINT NOT NULL,
    signing_token TEXT
);
INSERT INTO auth_state (generation, signing_token) VALUES (0, NULL);
"#,
    // 8: tasks are deleted once past `expires` (resolved ones only), found by this index.
    r#"
CREATE INDEX tasks_expires ON tasks (expires) WHERE deadline_due IS NULL;
"#,
    // 9: the worker registry (each worker's record as JSON, its lifecycle events), and the
    // worker running a task's last run (`workerGroup/workerId`, while it runs; not indexed, so
    // that claims and reports keep their heap-only updates: a worker's runs are found among
    // the running tasks through tasks_taken_until).
    r#"
CREATE TABLE workers (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    record        TEXT NOT NULL,
    last_seen     BIGINT NOT NULL,
    watched       BOOLEAN NOT NULL,
    expires       BIGINT NOT NULL,
    PRIMARY KEY (task_queue_id, worker_group, worker_id)
);
CREATE INDEX workers_watched ON workers (last_seen) WHERE watched;
CREATE INDEX workers_expires ON workers (expires);
CREATE TABLE worker_events (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    seq           BIGINT NOT NULL,
    event         TEXT NOT NULL,
    PRIMARY KEY (task_queue_id, worker_group, worker_id, seq)
);
ALTER TABLE tasks ADD COLUMN worker TEXT;
UPDATE tasks SET worker = (runs::jsonb -> -1 ->> 'workerGroup') || '/' || (runs::jsonb -> -1 ->> 'workerId')
    WHERE taken_until IS NOT NULL;
"#,
    // 10: Swarming's slices of a task (JSON, NULL when none); `dimensions` holds the current one's.
    r#"
ALTER TABLE tasks ADD COLUMN slices TEXT;
"#,
    // 11: a task's secrets, apart from its row (read only by a claim).
    r#"
CREATE TABLE task_secrets (
    task_id TEXT PRIMARY KEY,
    secrets TEXT NOT NULL
);
"#,
    // 12: Swarming's dedup: an idempotent task's properties hash, and the latest completion
    // of each hash.
    r#"
ALTER TABLE tasks ADD COLUMN dedup TEXT;
CREATE TABLE completions (
    hash      TEXT PRIMARY KEY,
    task_id   TEXT NOT NULL,
    completed BIGINT NOT NULL
);
CREATE INDEX completions_task ON completions (task_id);
"#,
    // 13: tasks by tag (`key:value`), newest (by `created`) first; filled for existing tasks.
    r#"
CREATE TABLE task_tags (
    tag     TEXT NOT NULL,
    created BIGINT NOT NULL,
    task_id TEXT NOT NULL,
    PRIMARY KEY (tag, created, task_id)
);
CREATE INDEX task_tags_task ON task_tags (task_id);
INSERT INTO task_tags (tag, created, task_id)
    SELECT j.key || ':' || j.value,
           (extract(epoch FROM (t.definition::jsonb ->> 'created')::timestamptz) * 1000)::bigint, t.task_id
    FROM tasks t, jsonb_each_text(t.tags::jsonb) AS j(key, value) WHERE t.tags IS NOT NULL
    ON CONFLICT DO NOTHING;
"#,
    // 14: what the overview lists: groups (dated by their first task's `created`) and graphs
    // newest first, and tasks that failed (failed or exception), filed under the tag `failed`
    // (user tags are all `key:value`) at the time they failed; existing failures by creation.
    r#"
ALTER TABLE task_groups ADD COLUMN created BIGINT NOT NULL DEFAULT 0;
UPDATE task_groups g SET created = coalesce((SELECT min((extract(epoch FROM (t.definition::jsonb ->> 'created')::timestamptz) * 1000)::bigint)
    FROM tasks t WHERE t.task_group_id = g.task_group_id), 0);
CREATE INDEX task_groups_created ON task_groups (created, task_group_id);
CREATE INDEX task_graphs_created ON task_graphs (created, task_graph_id);
INSERT INTO task_tags (tag, created, task_id)
    SELECT 'failed', (extract(epoch FROM (definition::jsonb ->> 'created')::timestamptz) * 1000)::bigint, task_id
    FROM tasks WHERE state IN ('failed', 'exception')
    ON CONFLICT DO NOTHING;
"#,
    // 15: whether a task has secrets (1, else NULL), so a claim looks them up only then.
    r#"
ALTER TABLE tasks ADD COLUMN secrets SMALLINT;
UPDATE tasks SET secrets = 1 WHERE (definition::jsonb ->> 'hasSecrets') = 'true';
"#,
    // 16: an uploaded blob's size (a run's bytes are summed from its records) and, in a
    // store that keeps each upload apart, its object.
    r#"
ALTER TABLE artifacts ADD COLUMN bytes BIGINT;
ALTER TABLE artifacts ADD COLUMN object TEXT;
"#,
    // 17: live logs, chunk by chunk, so that every server reads and appends to any run's.
    r#"
CREATE TABLE log_chunks (
    task_id TEXT COLLATE "C" NOT NULL,
    run_id  INTEGER NOT NULL,
    start   BIGINT NOT NULL,
    bytes   BYTEA NOT NULL,
    PRIMARY KEY (task_id, run_id, start)
);
"#,
    // 18: pending tasks indexed by dimension set, each set filed under an anchor value.
    crate::postgres::dimension_sets::MIGRATION,
    // 19: claims appended apart from their worker's record, folded into it as it is read.
    r#"
CREATE TABLE worker_claims (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    seq           BIGSERIAL,
    task_id       TEXT NOT NULL,
    run_id        INTEGER NOT NULL,
    at            BIGINT NOT NULL,
    PRIMARY KEY (task_queue_id, worker_group, worker_id, seq)
);
"#,
    // 20: the client that created a task (and when), and its tasks newest first.
    r#"
ALTER TABLE tasks ADD COLUMN created_by TEXT;
ALTER TABLE tasks ADD COLUMN created BIGINT;
CREATE INDEX tasks_created_by ON tasks (created_by, created, task_id) WHERE created_by IS NOT NULL;
"#,
    // 21: the services' documents (Index, Hooks), and their secret kinds apart.
    r#"
CREATE TABLE documents (
    kind    TEXT NOT NULL,
    key     TEXT COLLATE "C" NOT NULL,
    body    TEXT NOT NULL,
    expires BIGINT,
    due     BIGINT,
    PRIMARY KEY (kind, key)
);
CREATE INDEX documents_expires ON documents (expires) WHERE expires IS NOT NULL;
CREATE INDEX documents_due ON documents (kind, due) WHERE due IS NOT NULL;
CREATE TABLE secret_documents (
    kind    TEXT NOT NULL,
    key     TEXT COLLATE "C" NOT NULL,
    body    TEXT NOT NULL,
    expires BIGINT,
    due     BIGINT,
    PRIMARY KEY (kind, key)
);
CREATE INDEX secret_documents_expires ON secret_documents (expires) WHERE expires IS NOT NULL;
"#,
    // 22: what a task that asks for indexing keeps for it: its `extra.index`.
    r#"
ALTER TABLE tasks ADD COLUMN index_options TEXT;
UPDATE tasks SET index_options = (definition::json #> '{extra,index}')::text WHERE routes LIKE '%"index.%';
"#,
    // 23: each group's failed tasks, counted for its verdict.
    r"
CREATE INDEX tasks_group_failed ON tasks (task_group_id) WHERE state IN ('failed', 'exception');
",
    // 24: each worker's claims (the runs each took), by time (kept for the queue retention).
    r#"
CREATE TABLE worker_runs (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    at            BIGINT NOT NULL,
    task_id       TEXT COLLATE "C" NOT NULL,
    runs          TEXT NOT NULL,
    PRIMARY KEY (task_queue_id, worker_group, worker_id, at, task_id)
);
"#,
];

/// Brings the database to the newest schema; safe to run from several servers at once.
///
/// # Errors
/// When the database is unreachable, a migration fails (nothing of it is applied), or the
/// database was migrated by a newer Shoal.
pub(crate) fn migrate(client: &mut impl GenericClient) -> Result<usize, StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS shoal_schema (version INTEGER NOT NULL)")?;
    let version: Option<i32> = tx.query_opt("SELECT version FROM shoal_schema", &[])?.map(|row| row.get(0));
    let version = version.unwrap_or(0) as usize;
    if version > MIGRATIONS.len() {
        return Err(StoreError::Settings(format!(
            "the database's schema is version {version}, newer than this Shoal knows ({}); upgrade Shoal",
            MIGRATIONS.len()
        )));
    }
    for sql in &MIGRATIONS[version..] {
        tx.batch_execute(sql)?;
    }
    let newest = MIGRATIONS.len() as i32;
    if version == 0 {
        tx.execute("INSERT INTO shoal_schema (version) VALUES ($1)", &[&newest])?;
    } else {
        tx.execute("UPDATE shoal_schema SET version = $1", &[&newest])?;
    }
    tx.commit()?;
    Ok(MIGRATIONS.len() - version)
}
