//! The SQLite schema and its versioned migrations (tracked in `PRAGMA user_version`).

use rusqlite::Connection;

/// Migrations in order; entry `i` brings the schema from version `i` to `i + 1`. Never edit
/// a released entry: append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE tasks (
    task_id       TEXT PRIMARY KEY NOT NULL,
    task_queue_id TEXT NOT NULL,
    scheduler_id  TEXT NOT NULL,
    project_id    TEXT NOT NULL,
    task_group_id TEXT NOT NULL,
    priority      TEXT NOT NULL,     -- JSON: a name in quotes or a number
    retries       INTEGER NOT NULL,
    retries_left  INTEGER NOT NULL,
    deadline      INTEGER NOT NULL,  -- ms since the epoch, as every time here
    expires       INTEGER NOT NULL,
    requires      TEXT NOT NULL,
    dimensions    TEXT,              -- JSON object, NULL when none
    runs          TEXT NOT NULL,     -- JSON array of runs
    state         TEXT NOT NULL,
    taken_until   INTEGER,           -- set only while the last run is running: the claim-expiry due time
    deadline_due  INTEGER,           -- the deadline while unresolved, else NULL: the deadline due time
    pending_seq   INTEGER,           -- claim order within a priority while pending
    definition    TEXT NOT NULL      -- the checked definition as served by task()
);
CREATE INDEX tasks_group ON tasks (task_group_id, task_id);
CREATE INDEX tasks_taken_until ON tasks (taken_until) WHERE taken_until IS NOT NULL;
CREATE INDEX tasks_deadline_due ON tasks (deadline_due) WHERE deadline_due IS NOT NULL;
CREATE INDEX tasks_pending ON tasks (task_queue_id, pending_seq) WHERE state = 'pending';
-- Entries sort by (queue, rowid): claims append here instead of writing random pages.
CREATE INDEX tasks_running ON tasks (task_queue_id) WHERE state = 'running';

CREATE TABLE task_dependencies (
    required_task_id  TEXT NOT NULL,
    dependent_task_id TEXT NOT NULL,
    requires          TEXT NOT NULL,
    satisfied         INTEGER NOT NULL,
    PRIMARY KEY (required_task_id, dependent_task_id)
) WITHOUT ROWID;
CREATE INDEX task_dependencies_unsatisfied ON task_dependencies (dependent_task_id) WHERE satisfied = 0;

CREATE TABLE task_groups (
    task_group_id TEXT PRIMARY KEY NOT NULL,
    scheduler_id  TEXT NOT NULL,
    expires       INTEGER NOT NULL,
    sealed        INTEGER
) WITHOUT ROWID;

CREATE TABLE task_queues (
    task_queue_id    TEXT PRIMARY KEY NOT NULL,
    expires          INTEGER NOT NULL,
    last_date_active INTEGER NOT NULL,
    description      TEXT NOT NULL,
    stability        TEXT NOT NULL
) WITHOUT ROWID;
",
    r"
CREATE TABLE artifacts (
    task_id  TEXT NOT NULL,
    run_id   INTEGER NOT NULL,
    name     TEXT NOT NULL,
    kind     TEXT NOT NULL,     -- JSON: storageType and its fields
    present  INTEGER NOT NULL,  -- 0 while a blob has not been uploaded
    expires  INTEGER NOT NULL,
    PRIMARY KEY (task_id, run_id, name)
) WITHOUT ROWID;
CREATE INDEX artifacts_expires ON artifacts (expires);
",
    r"
-- What messages carry: the task's routes (CC) and tags; NULL when empty.
ALTER TABLE tasks ADD COLUMN routes TEXT;
ALTER TABLE tasks ADD COLUMN tags TEXT;
UPDATE tasks SET
    routes = CASE WHEN json_array_length(definition, '$.routes') > 0 THEN json_extract(definition, '$.routes') END,
    tags = CASE WHEN json_extract(definition, '$.tags') NOT IN ('{}', '') THEN json_extract(definition, '$.tags') END;
-- Whether a group still has an unresolved task (task-group-resolved).
CREATE INDEX tasks_group_unresolved ON tasks (task_group_id) WHERE deadline_due IS NOT NULL;
-- Messages committed with their transition, deleted once published.
CREATE TABLE outbox (
    seq         INTEGER PRIMARY KEY,
    exchange    TEXT NOT NULL,   -- short name, e.g. task-pending
    routing_key TEXT NOT NULL,
    cc          TEXT,            -- JSON array of extra routing keys, NULL when none
    body        TEXT NOT NULL
);
",
    // 4: the outbox holds one row per committed write batch (see sqlite/outbox.rs), and
    // remembers how far publication went, so sequence numbers never restart.
    r"
CREATE TABLE outbox_batches (
    first_seq INTEGER PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    messages  TEXT NOT NULL   -- JSON array of {e: exchange, k: routing key, c: [CC keys], b: body}
);
INSERT INTO outbox_batches (first_seq, last_seq, messages)
    SELECT MIN(seq), MAX(seq),
           json_group_array(json_object('e', exchange, 'k', routing_key, 'c', json(coalesce(cc, '[]')), 'b', json(body))
                            ORDER BY seq)
    FROM outbox HAVING count(*) > 0;
CREATE TABLE outbox_state (published INTEGER NOT NULL);
INSERT INTO outbox_state (published) SELECT coalesce(MIN(seq) - 1, 0) FROM outbox;
DROP TABLE outbox;
",
    // 5: the task-graph scheduler (seed 000): a graph's counts of open and failed-for-good
    // tasks (its state follows from them), and each labelled task's rerun budget.
    r"
CREATE TABLE task_graphs (
    task_graph_id TEXT PRIMARY KEY NOT NULL,
    scheduler_id  TEXT NOT NULL,
    routing       TEXT NOT NULL,
    open          INTEGER NOT NULL,  -- tasks not completed
    failed        INTEGER NOT NULL,  -- tasks failed with no reruns left
    metadata      TEXT NOT NULL,     -- JSON object
    tags          TEXT NOT NULL,     -- JSON object
    created       INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE graph_tasks (
    task_id       TEXT PRIMARY KEY NOT NULL,
    task_graph_id TEXT NOT NULL,
    label         TEXT NOT NULL,
    requires      TEXT NOT NULL,     -- JSON array of labels
    reruns        INTEGER NOT NULL,
    reruns_left   INTEGER NOT NULL,
    failed        INTEGER NOT NULL,  -- 1 once it failed with no reruns left, until run again
    submitted     TEXT NOT NULL      -- the node as submitted (JSON), to recognize a repeat
) WITHOUT ROWID;
CREATE UNIQUE INDEX graph_tasks_label ON graph_tasks (task_graph_id, label);
",
    // 6: clients and roles (the Auth API), and the generation every change moves on so
    // servers know to reload them; the server's signing token.
    r"
CREATE TABLE auth_entities (
    kind TEXT NOT NULL,   -- client or role
    id   TEXT NOT NULL,
    body TEXT NOT NULL,   -- JSON of the client or role
    PRIMARY KEY (kind, id)
) WITHOUT ROWID;
CREATE TABLE auth_state (
    generation    INTEGER NOT NULL,
    signing_token TEXT
);
INSERT INTO auth_state (generation, signing_token) VALUES (0, NULL);
",
    // 7: tasks are deleted once past `expires` (resolved ones only), found by this index.
    r"
CREATE INDEX tasks_expires ON tasks (expires) WHERE deadline_due IS NULL;
",
    // 8: the worker registry (each worker's record as JSON, its lifecycle events), and the
    // worker running a task's last run (`workerGroup/workerId`, while it runs).
    r"
CREATE TABLE workers (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    record        TEXT NOT NULL,     -- JSON of the worker
    last_seen     INTEGER NOT NULL,
    watched       INTEGER NOT NULL,  -- 1 while silence would make it missing
    expires       INTEGER NOT NULL,
    PRIMARY KEY (task_queue_id, worker_group, worker_id)
) WITHOUT ROWID;
CREATE INDEX workers_watched ON workers (last_seen) WHERE watched = 1;
CREATE INDEX workers_expires ON workers (expires);
CREATE TABLE worker_events (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    event         TEXT NOT NULL,     -- JSON of the event
    PRIMARY KEY (task_queue_id, worker_group, worker_id, seq)
) WITHOUT ROWID;
ALTER TABLE tasks ADD COLUMN worker TEXT;
UPDATE tasks SET worker = json_extract(runs, '$[#-1].workerGroup') || '/' || json_extract(runs, '$[#-1].workerId')
    WHERE state = 'running';
",
    // 9: Swarming's slices of a task (JSON, NULL when none); `dimensions` holds the current one's.
    r"
ALTER TABLE tasks ADD COLUMN slices TEXT;
",
    // 10: Swarming's dedup: an idempotent task's properties hash, and the latest completion
    // of each hash.
    r"
ALTER TABLE tasks ADD COLUMN dedup TEXT;
CREATE TABLE completions (
    hash      TEXT PRIMARY KEY,
    task_id   TEXT NOT NULL,
    completed INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX completions_task ON completions (task_id);
",
    // 11: tasks by tag (`key:value`), newest (by `created`) first; filled for existing tasks.
    r"
CREATE TABLE task_tags (
    tag     TEXT NOT NULL,
    created INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    PRIMARY KEY (tag, created, task_id)
) WITHOUT ROWID;
CREATE INDEX task_tags_task ON task_tags (task_id);
INSERT OR IGNORE INTO task_tags (tag, created, task_id)
    SELECT j.key || ':' || j.value,
           CAST((julianday(json_extract(t.definition, '$.created')) - 2440587.5) * 86400000 AS INTEGER), t.task_id
    FROM tasks t, json_each(t.tags) j WHERE t.tags IS NOT NULL;
",
    // 12: what the overview lists: groups and graphs newest first, and tasks that failed
    // (failed or exception), filed under the tag `failed` (user tags are all `key:value`) at
    // the time they failed. Existing groups are dated by their first task, existing failures
    // by their creation.
    r"
ALTER TABLE task_groups ADD COLUMN created INTEGER NOT NULL DEFAULT 0;
UPDATE task_groups SET created = coalesce((SELECT min(strftime('%s', json_extract(t.definition, '$.created')) * 1000
    + CAST(substr(json_extract(t.definition, '$.created'), 21, 3) AS INTEGER))
    FROM tasks t WHERE t.task_group_id = task_groups.task_group_id), 0);
CREATE INDEX task_groups_created ON task_groups (created, task_group_id);
CREATE INDEX task_graphs_created ON task_graphs (created, task_graph_id);
INSERT OR IGNORE INTO task_tags (tag, created, task_id)
    SELECT 'failed', strftime('%s', json_extract(definition, '$.created')) * 1000
        + CAST(substr(json_extract(definition, '$.created'), 21, 3) AS INTEGER), task_id
    FROM tasks WHERE state IN ('failed', 'exception');
",
    // 13: a task named like its group (Taskcluster's default group, so every task created
    // without one, and the first task of most groups) is found by its id, not filed by group:
    // one b-tree keyed by a random id fewer to write for each such task. Every query of a
    // group's tasks reads the index and looks the namesake up by its id (`reads.rs`, `tx.rs`).
    r"
DROP INDEX tasks_group;
CREATE INDEX tasks_group ON tasks (task_group_id, task_id) WHERE task_group_id <> task_id;
",
    // 14: a group created by its namesake has no row of its own while it needs none: the
    // namesake's row implies it (`row::task_group`), and the row is written once the group
    // outgrows that (a later expiry, a seal, the namesake expiring before its members). One
    // b-tree keyed by a random id fewer to write per such task. `created` (the definition's,
    // NULL in rows written before) lists implied groups among the others, newest first.
    r"
ALTER TABLE tasks ADD COLUMN created INTEGER;
CREATE INDEX tasks_namesakes ON tasks (created, task_id) WHERE task_group_id = task_id;
",
    // 15: workers in a rowid table. In a `WITHOUT ROWID` table SQLite keeps at most ~1,000
    // bytes of a row in its page, and a worker with its twenty recent tasks is over that: each
    // claim's update wrote the row's page and an overflow page. Here a row stays whole in its
    // page, and an update of the record alone writes that page only (the key's index is
    // untouched).
    r"
CREATE TABLE workers_by_row (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    record        TEXT NOT NULL,
    last_seen     INTEGER NOT NULL,
    watched       INTEGER NOT NULL,
    expires       INTEGER NOT NULL,
    UNIQUE (task_queue_id, worker_group, worker_id)
);
INSERT INTO workers_by_row (task_queue_id, worker_group, worker_id, record, last_seen, watched, expires)
    SELECT task_queue_id, worker_group, worker_id, record, last_seen, watched, expires FROM workers;
DROP TABLE workers;
ALTER TABLE workers_by_row RENAME TO workers;
CREATE INDEX workers_watched ON workers (last_seen) WHERE watched = 1;
CREATE INDEX workers_expires ON workers (expires);
",
    // 16: whether a task has secrets (1, else NULL), so a claim looks them up only then.
    r"
ALTER TABLE tasks ADD COLUMN secrets INTEGER;
UPDATE tasks SET secrets = 1 WHERE json_extract(definition, '$.hasSecrets') = 1;
",
    // 17: an uploaded blob's size (a run's bytes are summed from its records) and, in a
    // store that keeps each upload apart, its object.
    r"
ALTER TABLE artifacts ADD COLUMN bytes INTEGER;
ALTER TABLE artifacts ADD COLUMN object TEXT;
",
    // 18: the client that created a task, and its tasks newest first.
    r"
ALTER TABLE tasks ADD COLUMN created_by TEXT;
CREATE INDEX tasks_created_by ON tasks (created_by, created, task_id) WHERE created_by IS NOT NULL;
",
    // 19: the services' documents (Index, Hooks; the secret kinds are in `secrets.db`).
    r"
CREATE TABLE documents (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    expires INTEGER,
    due INTEGER,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE INDEX documents_expires ON documents (expires) WHERE expires IS NOT NULL;
CREATE INDEX documents_due ON documents (kind, due) WHERE due IS NOT NULL;
",
    // 20: what a task that asks for indexing keeps for it: its `extra.index`.
    r#"
ALTER TABLE tasks ADD COLUMN index_options TEXT;
UPDATE tasks SET index_options = definition -> '$.extra.index' WHERE routes LIKE '%"index.%';
"#,
    // 21: each group's failed tasks, counted for its verdict. `exception` and `failed` are
    // the only states between those two names: a range costs each write to `tasks` less to
    // test than an IN list, which SQLite codes as a lookup table built per statement.
    r"
CREATE INDEX tasks_group_failed ON tasks (task_group_id) WHERE state BETWEEN 'exception' AND 'failed';
",
    // 22: each worker's claims (the runs each took), by time (kept for the queue retention).
    r"
CREATE TABLE worker_runs (
    task_queue_id TEXT NOT NULL,
    worker_group  TEXT NOT NULL,
    worker_id     TEXT NOT NULL,
    at            INTEGER NOT NULL,
    task_id       TEXT NOT NULL,     -- the first task of the claim
    runs          TEXT NOT NULL,     -- JSON: the runs claimed, [{taskId, runId}]
    PRIMARY KEY (task_queue_id, worker_group, worker_id, at, task_id)
) WITHOUT ROWID;
",
];

/// Attaches the secrets database (`secrets.db` beside `path`) as `secrets`, creating its
/// tables: tasks' secrets, and the secret kinds of the services' documents (the Secrets
/// service's secrets, hooks' trigger tokens), live in their own file, so the main database, its
/// WAL and whatever copies of it are made never hold them.
pub(crate) fn attach_secrets(conn: &Connection, path: &std::path::Path) -> rusqlite::Result<()> {
    let secrets = path.with_file_name("secrets.db");
    conn.execute("ATTACH DATABASE ?1 AS secrets", [secrets.to_string_lossy()])?;
    conn.execute_batch(
        "PRAGMA secrets.journal_mode = WAL; \
         CREATE TABLE IF NOT EXISTS secrets.task_secrets (task_id TEXT PRIMARY KEY, secrets TEXT NOT NULL) \
         WITHOUT ROWID; \
         CREATE TABLE IF NOT EXISTS secrets.documents (kind TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL, \
         expires INTEGER, due INTEGER, PRIMARY KEY (kind, key)) WITHOUT ROWID; \
         CREATE INDEX IF NOT EXISTS secrets.documents_expires ON documents (expires) WHERE expires IS NOT NULL;",
    )
}

/// Brings the database to the newest schema, one migration per transaction.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let version: usize = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    for (idx, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.execute_batch(&format!("PRAGMA user_version = {}", idx + 1))?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failed_states_are_the_ones_between_exception_and_failed_by_name() {
        // The partial index of each group's failed tasks (migration 21) selects them so.
        for name in ["unscheduled", "pending", "running", "completed", "failed", "exception"] {
            let state = shoal_engine::status::TaskState::from_name(name).expect("a state");
            let failed =
                matches!(state, shoal_engine::status::TaskState::Failed | shoal_engine::status::TaskState::Exception);
            assert_eq!(("exception"..="failed").contains(&name), failed, "{name}");
        }
    }

    #[test]
    fn tasks_written_before_schema_16_keep_whether_they_have_secrets() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..15] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch("PRAGMA user_version = 15").unwrap();
        let insert = "INSERT INTO tasks (task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, \
             retries, retries_left, deadline, expires, requires, runs, state, definition) \
             VALUES (?1, 'p/q', '-', 'none', ?1, '\"lowest\"', 0, 0, 1, 2, 'all-completed', '[]', 'pending', ?2)";
        conn.execute(insert, ["a", r#"{"hasSecrets":true}"#]).unwrap();
        conn.execute(insert, ["b", r#"{"payload":{"note":"\"hasSecrets\":true"}}"#]).unwrap();
        migrate(&mut conn).unwrap();
        let flagged: Vec<(String, Option<i64>)> = conn
            .prepare("SELECT task_id, secrets FROM tasks ORDER BY task_id")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(flagged, vec![("a".to_owned(), Some(1)), ("b".to_owned(), None)]);
    }

    #[test]
    fn tasks_written_before_schema_20_keep_their_extra_index_when_their_routes_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..19] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch("PRAGMA user_version = 19").unwrap();
        let insert = "INSERT INTO tasks (task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, \
             retries, retries_left, deadline, expires, requires, runs, state, definition, routes) \
             VALUES (?1, 'p/q', '-', 'none', ?1, '\"lowest\"', 0, 0, 1, 2, 'all-completed', '[]', 'pending', ?2, ?3)";
        let extra = r#"{"extra":{"index":{"rank":3}}}"#;
        conn.execute(insert, ["a", extra, r#"["index.x.y"]"#]).unwrap();
        conn.execute(insert, ["b", extra, r#"["other.index.x"]"#]).unwrap();
        migrate(&mut conn).unwrap();
        let kept: Vec<(String, Option<String>)> = conn
            .prepare("SELECT task_id, index_options FROM tasks ORDER BY task_id")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kept, vec![("a".to_owned(), Some(r#"{"rank":3}"#.to_owned())), ("b".to_owned(), None)]);
    }
}
