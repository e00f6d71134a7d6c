//! The read queries on SQLite ([`ReadDb`] over a read-only connection).

use rusqlite::{Connection, Row, params};
use shoal_engine::artifact::Artifact;
use shoal_engine::backlog::PendingSet;
use shoal_engine::group::{GROUP_EXPIRY_SLACK_MS, GroupCounts};
use shoal_engine::worker::{Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::ops::auth::AuthKind;
use crate::ops::documents::{DocKind, Document};
use crate::ops::graph::{GraphNode, StoredGraph};
use crate::outbox::OutboxEntry;
use crate::reads::{ClaimRecord, GroupFacts, ReadDb, StoredTask, TaskQuery, TaskStatements, pending_set};
use crate::row::Backends;
use crate::row::unresolved;
use crate::sqlite::documents;
use crate::sqlite::row::{self, N_TASK_COLUMNS, raw_json, task_from_row};
use crate::sqlite::{artifacts, graph, outbox, workers};
use crate::{ArtifactKey, QueueCounts, RecentGroup, TagQuery, TaskGroup, TaskQueueInfo};
use shoal_engine::status::TaskState;

/// A read-only connection.
pub(crate) struct ReadConn<'a>(pub(crate) &'a Connection);

/// The statements of [`TaskQuery`]'s kinds selecting `select` (`select_t` where the tasks
/// table is `t`): a task by id, the others binding (key, after, limit).
fn task_statements(select: &str, select_t: &str) -> [String; 7] {
    [
        format!("SELECT {select} FROM tasks WHERE task_id = ?1"),
        // A task named like its group is not in `tasks_group` (schema 13): it is found by its
        // id, and merged in order with the others.
        format!(
            "SELECT {select} FROM (SELECT * FROM tasks \
             WHERE task_group_id = ?1 AND task_group_id <> task_id AND task_id > ?2 \
             UNION ALL SELECT * FROM tasks WHERE task_id = ?1 AND task_group_id = ?1 AND task_id > ?2 \
             ORDER BY task_id LIMIT ?3) ORDER BY task_id"
        ),
        format!(
            "SELECT {select_t} FROM task_dependencies d JOIN tasks t ON t.task_id = d.dependent_task_id \
             WHERE d.required_task_id = ?1 AND d.dependent_task_id > ?2 ORDER BY d.dependent_task_id LIMIT ?3"
        ),
        format!(
            "SELECT {select} FROM tasks WHERE task_queue_id = ?1 AND state = 'pending' \
             AND pending_seq > CAST(?2 AS INTEGER) ORDER BY pending_seq LIMIT ?3"
        ),
        format!(
            "SELECT {select} FROM tasks WHERE task_queue_id = ?1 AND state = 'running' \
             AND task_id > ?2 ORDER BY task_id LIMIT ?3"
        ),
        format!(
            "SELECT {select_t}, g.created FROM task_tags g JOIN tasks t ON t.task_id = g.task_id WHERE g.tag = ?1 \
             AND (g.created, g.task_id) < (CAST(substr(?2, 1, instr(?2, ':') - 1) AS INTEGER), \
             substr(?2, instr(?2, ':') + 1)) ORDER BY g.created DESC, g.task_id DESC LIMIT ?3"
        ),
        format!(
            "SELECT {select_t}, t.created FROM tasks t WHERE t.created_by = ?1 \
             AND (t.created, t.task_id) < (CAST(substr(?2, 1, instr(?2, ':') - 1) AS INTEGER), \
             substr(?2, instr(?2, ':') + 1)) ORDER BY t.created DESC, t.task_id DESC LIMIT ?3"
        ),
    ]
}

/// This backend's statements for each kind of [`TaskQuery`].
static STATEMENTS: std::sync::LazyLock<TaskStatements> = std::sync::LazyLock::new(|| {
    TaskStatements::new(
        task_statements,
        Backends::Sqlite,
        "length(CAST(definition AS BLOB))",
        "length(CAST(t.definition AS BLOB))",
    )
});

impl ReadDb for ReadConn<'_> {
    fn tasks(&self, query: TaskQuery<'_>, limit: usize) -> Result<Vec<StoredTask>, StoreError> {
        let (key, after) = query.params();
        let mut stmt = self.0.prepare_cached(STATEMENTS.tasks(&query))?;
        let mut rows = match query {
            TaskQuery::Id(_) => stmt.query([key])?,
            _ => stmt.query(params![key, after, limit as i64])?,
        };
        let mut found = Vec::with_capacity(limit.min(1000));
        while let Some(row) = rows.next()? {
            let filed = matches!(query, TaskQuery::Tagged(..) | TaskQuery::Created(..))
                .then(|| row.get(N_TASK_COLUMNS + 1))
                .transpose()?;
            found.push(StoredTask { row: task_from_row(row)?, definition: raw_json(row, N_TASK_COLUMNS)?, filed });
        }
        Ok(found)
    }

    fn task_sizes(&self, query: TaskQuery<'_>, limit: usize) -> Result<Vec<u64>, StoreError> {
        let (key, after) = query.params();
        let mut stmt = self.0.prepare_cached(STATEMENTS.sizes(&query))?;
        let sizes = match query {
            TaskQuery::Id(_) => stmt.query_map([key], |row| row.get::<_, i64>(0))?.collect::<Result<Vec<_>, _>>()?,
            _ => stmt
                .query_map(params![key, after, limit as i64], |row| row.get::<_, i64>(0))?
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(sizes.into_iter().map(|size| size as u64).collect())
    }

    fn count_tagged(&self, query: &TagQuery) -> Result<u64, StoreError> {
        // Both bind (tag, since, until, state, queue, creator, more tags as a JSON array); a
        // creator's listing has no tag, so it leaves ?1 out.
        let sql = match query.creator_listing() {
            Some(_) => {
                "SELECT count(*) FROM tasks t WHERE t.created_by = ?6 AND t.created >= ?2 AND t.created <= ?3 \
                 AND (?4 IS NULL OR t.state = ?4) AND (?5 IS NULL OR t.task_queue_id = ?5) AND NOT EXISTS \
                 (SELECT 1 FROM json_each(?7) j WHERE NOT EXISTS \
                 (SELECT 1 FROM task_tags a WHERE a.task_id = t.task_id AND a.tag = j.value))"
            }
            None => {
                "SELECT count(*) FROM task_tags g JOIN tasks t ON t.task_id = g.task_id WHERE g.tag = ?1 \
                 AND g.created >= ?2 AND g.created <= ?3 AND (?4 IS NULL OR t.state = ?4) \
                 AND (?5 IS NULL OR t.task_queue_id = ?5) AND (?6 IS NULL OR t.created_by = ?6) AND NOT EXISTS \
                 (SELECT 1 FROM json_each(?7) j WHERE NOT EXISTS \
                 (SELECT 1 FROM task_tags a WHERE a.task_id = t.task_id AND a.tag = j.value))"
            }
        };
        let n: i64 = self.0.prepare_cached(sql)?.query_row(
            params![
                query.tag,
                query.since.map_or(i64::MIN, Timestamp::millis),
                query.until.map_or(i64::MAX, Timestamp::millis),
                query.state.map(TaskState::as_str),
                query.task_queue_id,
                query.created_by,
                serde_json::to_string(&query.also).map_err(crate::row::corrupt)?,
            ],
            |row| row.get(0),
        )?;
        Ok(n as u64)
    }

    fn queue_counts(&self, task_queue_id: &str) -> Result<QueueCounts, StoreError> {
        let count = |sql: &str| -> Result<u64, StoreError> {
            let n: i64 = self.0.prepare_cached(sql)?.query_row([task_queue_id], |row| row.get(0))?;
            Ok(n as u64)
        };
        Ok(QueueCounts {
            pending_tasks: count("SELECT COUNT(*) FROM tasks WHERE task_queue_id = ?1 AND state = 'pending'")?,
            claimed_tasks: count("SELECT COUNT(*) FROM tasks WHERE task_queue_id = ?1 AND state = 'running'")?,
        })
    }

    fn pending_sets(&self, task_queue_id: &str, scan: usize) -> Result<Vec<PendingSet>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT dimensions, COUNT(*), MIN(json_extract(runs, '$[#-1].scheduled')) FROM \
             (SELECT dimensions, runs FROM tasks WHERE task_queue_id = ?1 AND state = 'pending' \
              ORDER BY pending_seq LIMIT ?2) GROUP BY dimensions",
        )?;
        let mut rows = stmt.query(params![task_queue_id, scan as i64])?;
        let mut sets = Vec::new();
        while let Some(row) = rows.next()? {
            let (dimensions, oldest): (Option<String>, String) = (row.get(0)?, row.get(2)?);
            sets.push(pending_set(dimensions.as_deref(), row.get::<_, i64>(1)?, &oldest)?);
        }
        Ok(sets)
    }

    fn task_queues(&self, after: &str, limit: usize) -> Result<Vec<TaskQueueInfo>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id > ?1 ORDER BY task_queue_id LIMIT ?2",
        )?;
        let mut rows = stmt.query(params![after, limit as i64])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            found.push(queue_info(row)?);
        }
        Ok(found)
    }

    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id = ?1",
        )?;
        let mut rows = stmt.query([task_queue_id])?;
        rows.next()?.map(queue_info).transpose()
    }

    fn stored_artifact(&self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError> {
        artifacts::stored(self.0, key.task_id, key.run_id, &key.name)
    }

    fn artifacts(&self, task_id: TaskId, run_id: u32, after: &str, limit: usize) -> Result<Vec<Artifact>, StoreError> {
        artifacts::listed(self.0, task_id, run_id, after, limit)
    }

    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
        artifacts::expired(self.0, now, limit)
    }

    fn run_bytes(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
        artifacts::run_bytes(self.0, task_id, run_id)
    }

    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        row::task_group(self.0, group)
    }

    fn recent_groups(&self, before: (i64, &str), limit: usize) -> Result<Vec<RecentGroup>, StoreError> {
        // Groups with rows of their own, and those their namesakes imply (schema 14), merged.
        let mut stmt = self.0.prepare_cached(concat!(
            "SELECT r.*, NOT EXISTS (SELECT 1 FROM tasks u WHERE u.task_group_id = r.task_group_id AND ",
            unresolved!("u"),
            ") FROM (\
             SELECT * FROM (SELECT scheduler_id, expires, sealed, task_group_id, created FROM task_groups \
             WHERE (created, task_group_id) < (?1, ?2) ORDER BY created DESC, task_group_id DESC LIMIT ?3) \
             UNION ALL SELECT * FROM (SELECT scheduler_id, expires + ?4, NULL, task_id, created FROM tasks t \
             WHERE task_group_id = task_id AND (created, task_id) < (?1, ?2) \
             AND NOT EXISTS (SELECT 1 FROM task_groups g WHERE g.task_group_id = t.task_id) \
             ORDER BY created DESC, task_id DESC LIMIT ?3) \
             ORDER BY 5 DESC, 4 DESC LIMIT ?3) r ORDER BY r.created DESC, r.task_group_id DESC"
        ))?;
        let mut rows = stmt.query(params![before.0, before.1, limit as i64, GROUP_EXPIRY_SLACK_MS])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let id: String = row.get(3)?;
            let group = TaskId::parse(&id).ok_or_else(|| crate::row::corrupt(format!("task group id {id}")))?;
            let (created, resolved) = (Timestamp(row.get(4)?), row.get(5)?);
            found.push(RecentGroup { group: row::task_group_from_row(group, row)?, created, resolved });
        }
        Ok(found)
    }

    fn group_facts(&self, group: TaskId, names: usize) -> Result<GroupFacts, StoreError> {
        // Each count reads one index: the group's (which leaves its namesake out, schema 13),
        // its unresolved tasks', and its failed tasks' (schema 21).
        let mut stmt = self.0.prepare_cached(concat!(
            "SELECT (SELECT count(*) FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id), ",
            "(SELECT json_extract(definition, '$.metadata.name') FROM tasks WHERE task_id = ?1 AND task_group_id = ?1), ",
            "(SELECT count(*) FROM tasks u WHERE u.task_group_id = ?1 AND ",
            unresolved!("u"),
            "), (SELECT count(*) FROM tasks u WHERE u.task_group_id = ?1 AND ",
            unresolved!("u"),
            " AND u.state IN ('pending', 'running')), ",
            "(SELECT count(*) FROM tasks WHERE task_group_id = ?1 AND state BETWEEN 'exception' AND 'failed')"
        ))?;
        let mut facts = stmt.query_row([group.as_str()], |row| {
            let namesake: Option<String> = row.get(1)?;
            let counts = GroupCounts {
                total: row.get::<_, i64>(0)? as u64 + u64::from(namesake.is_some()),
                unresolved: row.get::<_, i64>(2)? as u64,
                active: row.get::<_, i64>(3)? as u64,
                failed: row.get::<_, i64>(4)? as u64,
            };
            Ok(GroupFacts { counts, namesake, names: Vec::new() })
        })?;
        let mut stmt = self.0.prepare_cached(
            "SELECT json_extract(definition, '$.metadata.name') FROM tasks \
             WHERE task_group_id = ?1 AND task_group_id <> task_id ORDER BY task_id LIMIT ?2",
        )?;
        facts.names = stmt
            .query_map(params![group.as_str(), names as i64], |row| row.get::<_, Option<String>>(0))?
            .filter_map(Result::transpose)
            .collect::<Result<_, _>>()?;
        Ok(facts)
    }

    fn recent_graphs(&self, before: (i64, &str), limit: usize) -> Result<Vec<(StoredGraph, Timestamp)>, StoreError> {
        graph::recent(self.0, before, limit)
    }

    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
        graph::graph(self.0, task_graph_id)
    }

    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<GraphNode>, StoreError> {
        graph::nodes(self.0, task_graph_id)
    }

    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        outbox::read(self.0, from, limit)
    }

    fn expired_tasks(&self, now: Timestamp, limit: usize) -> Result<Vec<(TaskId, u32)>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT task_id, json_array_length(runs) FROM tasks WHERE expires <= ?1 AND deadline_due IS NULL \
             ORDER BY expires LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![now.millis(), limit as i64], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })?;
        rows.map(|row| {
            let (id, runs) = row?;
            let task_id = TaskId::parse(&id).ok_or_else(|| crate::row::corrupt(format!("task id {id}")))?;
            Ok((task_id, runs as u32))
        })
        .collect()
    }

    fn auth(&self, kind: Option<AuthKind>) -> Result<(i64, Vec<String>), StoreError> {
        let generation: i64 =
            self.0.prepare_cached("SELECT generation FROM auth_state")?.query_row([], |row| row.get(0))?;
        let Some(kind) = kind else { return Ok((generation, Vec::new())) };
        let mut stmt = self.0.prepare_cached("SELECT body FROM auth_entities WHERE kind = ?1 ORDER BY id")?;
        let bodies = stmt.query_map([kind.as_str()], |row| row.get(0))?.collect::<Result<_, _>>()?;
        Ok((generation, bodies))
    }

    fn worker(&self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        workers::load(self.0, key)
    }

    fn workers(&self, task_queue_id: &str, after: (&str, &str), limit: usize) -> Result<Vec<Worker>, StoreError> {
        workers::list(self.0, task_queue_id, after, limit)
    }

    fn running_by_worker(&self, task_queue_id: &str) -> Result<Vec<(String, TaskId)>, StoreError> {
        workers::running(self.0, task_queue_id)
    }

    fn worker_claims(
        &self,
        key: &WorkerKey,
        before: (i64, &str),
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        workers::claims(self.0, key, before, limit)
    }

    fn worker_events(&self, key: &WorkerKey, before: u64, limit: usize) -> Result<Vec<(u64, WorkerEvent)>, StoreError> {
        workers::events(self.0, key, before, limit)
    }

    fn document(&self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
        documents::load(self.0, kind, key)
    }

    fn documents(
        &self,
        kind: DocKind,
        after: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        documents::list(self.0, kind, after, end, limit)
    }

    fn due_documents(
        &self,
        kind: DocKind,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        documents::due(self.0, kind, now, limit)
    }
}

fn queue_info(row: &Row<'_>) -> Result<TaskQueueInfo, StoreError> {
    Ok(TaskQueueInfo {
        task_queue_id: row.get(0)?,
        expires: Timestamp(row.get(1)?),
        last_date_active: Timestamp(row.get(2)?),
        description: row.get(3)?,
        stability: row.get(4)?,
    })
}
