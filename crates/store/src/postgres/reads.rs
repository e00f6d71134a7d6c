//! The read queries on PostgreSQL ([`ReadDb`] over a pooled blocking connection).

use std::cell::RefCell;

use postgres::Row;
use postgres::types::ToSql;
use shoal_engine::artifact::Artifact;
use shoal_engine::backlog::PendingSet;
use shoal_engine::group::GroupCounts;
use shoal_engine::worker::{Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

use crate::ops::auth::AuthKind;
use crate::ops::documents::{DocKind, Document};
use crate::ops::graph::{GraphNode, StoredGraph};
use crate::outbox::OutboxEntry;
use crate::outbox::format::append_row;
use crate::postgres::row::{
    GROUP_COLUMN_COUNT, GROUP_COLUMNS, N_TASK_COLUMNS, artifact_from_row, raw_json, task_from_row, task_group_from_row,
};
use crate::postgres::{PgConn, graph};
use crate::reads::{ClaimRecord, GroupFacts, ReadDb, StoredTask, TaskQuery, TaskStatements, pending_set};
use crate::row::Backends;
use crate::row::corrupt;
use crate::row::unresolved;
use crate::{ArtifactKey, QueueCounts, RecentGroup, StoreError, TagQuery, TaskGroup, TaskQueueInfo};
use shoal_engine::status::TaskState;

/// A pooled connection; reads take `&self`, a query needs the connection mutably.
pub(crate) struct PgReads<'a>(pub(crate) RefCell<&'a mut PgConn>);

impl PgReads<'_> {
    pub(crate) fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        Ok(self.0.borrow_mut().query(sql, params)?)
    }
}

/// The statements of [`TaskQuery`]'s kinds selecting `select` (`select_t` where the tasks
/// table is `t`): a task by id, the others binding (key, after, limit).
fn task_statements(select: &str, select_t: &str) -> [String; 7] {
    [
        format!("SELECT {select} FROM tasks WHERE task_id = $1"),
        format!(
            "SELECT {select} FROM tasks WHERE task_group_id = $1 AND task_id > $2 \
             ORDER BY task_id LIMIT $3"
        ),
        format!(
            "SELECT {select_t} FROM task_dependencies d JOIN tasks t ON t.task_id = d.dependent_task_id \
             WHERE d.required_task_id = $1 AND d.dependent_task_id > $2 ORDER BY d.dependent_task_id LIMIT $3"
        ),
        format!(
            "SELECT {select} FROM tasks WHERE task_queue_id = $1 AND state = 'pending' \
             AND pending_seq > $2::text::int8 ORDER BY pending_seq LIMIT $3"
        ),
        // Running tasks are found by tasks_taken_until (migration 6): they are the rows
        // with a claim-expiry time.
        format!(
            "SELECT {select} FROM tasks WHERE taken_until IS NOT NULL AND task_queue_id = $1 \
             AND state = 'running' AND task_id > $2 ORDER BY task_id LIMIT $3"
        ),
        format!(
            "SELECT {select_t}, g.created FROM task_tags g JOIN tasks t ON t.task_id = g.task_id WHERE g.tag = $1 \
             AND (g.created, g.task_id) < (split_part($2, ':', 1)::int8, split_part($2, ':', 2)) \
             ORDER BY g.created DESC, g.task_id DESC LIMIT $3"
        ),
        format!(
            "SELECT {select_t}, t.created FROM tasks t WHERE t.created_by = $1 \
             AND (t.created, t.task_id) < (split_part($2, ':', 1)::int8, split_part($2, ':', 2)) \
             ORDER BY t.created DESC, t.task_id DESC LIMIT $3"
        ),
    ]
}

/// This backend's statements for each kind of [`TaskQuery`].
static STATEMENTS: std::sync::LazyLock<TaskStatements> = std::sync::LazyLock::new(|| {
    TaskStatements::new(
        task_statements,
        Backends::Postgres,
        "octet_length(definition)::int8",
        "octet_length(t.definition)::int8",
    )
});

impl ReadDb for PgReads<'_> {
    fn tasks(&self, query: TaskQuery<'_>, limit: usize) -> Result<Vec<StoredTask>, StoreError> {
        let (key, after) = query.params();
        let limit = limit as i64;
        let rows = match query {
            TaskQuery::Id(_) => self.query(STATEMENTS.tasks(&query), &[&key])?,
            _ => self.query(STATEMENTS.tasks(&query), &[&key, &after, &limit])?,
        };
        rows.iter()
            .map(|row| {
                let filed = matches!(query, TaskQuery::Tagged(..) | TaskQuery::Created(..))
                    .then(|| row.try_get(N_TASK_COLUMNS + 1))
                    .transpose()?;
                Ok(StoredTask { row: task_from_row(row)?, definition: raw_json(row, N_TASK_COLUMNS)?, filed })
            })
            .collect()
    }

    fn task_sizes(&self, query: TaskQuery<'_>, limit: usize) -> Result<Vec<u64>, StoreError> {
        let (key, after) = query.params();
        let limit = limit as i64;
        let rows = match query {
            TaskQuery::Id(_) => self.query(STATEMENTS.sizes(&query), &[&key])?,
            _ => self.query(STATEMENTS.sizes(&query), &[&key, &after, &limit])?,
        };
        rows.iter().map(|row| Ok(row.try_get::<_, i64>(0)? as u64)).collect()
    }

    fn count_tagged(&self, query: &TagQuery) -> Result<u64, StoreError> {
        let since = query.since.map_or(i64::MIN, Timestamp::millis);
        let until = query.until.map_or(i64::MAX, Timestamp::millis);
        let state = query.state.map(TaskState::as_str);
        let filters = "($4::text IS NULL OR t.state = $4) AND ($5::text IS NULL OR t.task_queue_id = $5) AND NOT EXISTS \
            (SELECT 1 FROM unnest($7::text[]) j(tag) WHERE NOT EXISTS \
            (SELECT 1 FROM task_tags a WHERE a.task_id = t.task_id AND a.tag = j.tag))";
        let rows = match query.creator_listing() {
            Some(client_id) => self.query(
                &format!(
                    "SELECT count(*) FROM tasks t WHERE t.created_by = $1 AND t.created >= $2 AND t.created <= $3 \
                     AND {filters} AND $6::text IS NULL"
                ),
                &[&client_id, &since, &until, &state, &query.task_queue_id, &None::<String>, &query.also],
            )?,
            None => self.query(
                &format!(
                    "SELECT count(*) FROM task_tags g JOIN tasks t ON t.task_id = g.task_id WHERE g.tag = $1 \
                     AND g.created >= $2 AND g.created <= $3 AND {filters} AND ($6::text IS NULL OR t.created_by = $6)"
                ),
                &[&query.tag, &since, &until, &state, &query.task_queue_id, &query.created_by, &query.also],
            )?,
        };
        let n: i64 = rows.first().map(|row| row.try_get(0)).transpose()?.unwrap_or(0);
        Ok(n as u64)
    }

    fn pending_sets(&self, task_queue_id: &str, scan: usize) -> Result<Vec<PendingSet>, StoreError> {
        let rows = self.query(
            "SELECT dimensions::text, count(*), min((runs::jsonb -> -1) ->> 'scheduled') FROM \
             (SELECT dimensions, runs FROM tasks WHERE task_queue_id = $1 AND state = 'pending' \
              ORDER BY priority_rank, pending_seq LIMIT $2) line GROUP BY dimensions",
            &[&task_queue_id, &(scan as i64)],
        )?;
        rows.iter()
            .map(|row| {
                let (dimensions, oldest): (Option<&str>, &str) = (row.try_get(0)?, row.try_get(2)?);
                pending_set(dimensions, row.try_get(1)?, oldest)
            })
            .collect()
    }

    fn queue_counts(&self, task_queue_id: &str) -> Result<QueueCounts, StoreError> {
        let rows = self.query(
            "SELECT (SELECT count(*) FROM tasks WHERE task_queue_id = $1 AND state = 'pending'), \
             (SELECT count(*) FROM tasks WHERE taken_until IS NOT NULL AND task_queue_id = $1 AND state = 'running')",
            &[&task_queue_id],
        )?;
        let row = rows.first().ok_or_else(|| StoreError::Corrupt("no count".into()))?;
        Ok(QueueCounts {
            pending_tasks: row.try_get::<_, i64>(0)? as u64,
            claimed_tasks: row.try_get::<_, i64>(1)? as u64,
        })
    }

    fn task_queues(&self, after: &str, limit: usize) -> Result<Vec<TaskQueueInfo>, StoreError> {
        let rows = self.query(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id > $1 ORDER BY task_queue_id LIMIT $2",
            &[&after, &(limit as i64)],
        )?;
        rows.iter().map(queue_info).collect()
    }

    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError> {
        let rows = self.query(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id = $1",
            &[&task_queue_id],
        )?;
        rows.first().map(queue_info).transpose()
    }

    fn stored_artifact(&self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError> {
        let rows = self.query(
            "SELECT name, kind, present, expires, bytes, object FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name = $3",
            &[&key.task_id.as_str(), &(key.run_id as i32), &key.name],
        )?;
        rows.first().map(artifact_from_row).transpose()
    }

    fn artifacts(&self, task_id: TaskId, run_id: u32, after: &str, limit: usize) -> Result<Vec<Artifact>, StoreError> {
        let rows = self.query(
            "SELECT name, kind, present, expires, bytes, object FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name > $3 \
             ORDER BY name LIMIT $4",
            &[&task_id.as_str(), &(run_id as i32), &after, &(limit as i64)],
        )?;
        rows.iter().map(artifact_from_row).collect()
    }

    fn run_bytes(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
        let rows = self.query(
            "SELECT COALESCE(SUM(bytes), 0)::BIGINT FROM artifacts WHERE task_id = $1 AND run_id = $2",
            &[&task_id.as_str(), &(run_id as i32)],
        )?;
        let total: i64 = rows.first().map(|row| row.try_get(0)).transpose()?.unwrap_or_default();
        Ok(u64::try_from(total).unwrap_or_default())
    }

    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
        let rows = self.query(
            "SELECT name, kind, present, expires, bytes, object, task_id, run_id FROM artifacts WHERE expires <= $1 \
             ORDER BY expires LIMIT $2",
            &[&now.millis(), &(limit as i64)],
        )?;
        let mut expired = Vec::with_capacity(rows.len());
        for row in &rows {
            let artifact = artifact_from_row(row)?;
            let task_id: &str = row.try_get(6)?;
            let task_id = TaskId::parse(task_id).ok_or_else(|| corrupt(format!("task id {task_id}")))?;
            let key = ArtifactKey { task_id, run_id: row.try_get::<_, i32>(7)? as u32, name: artifact.name.clone() };
            expired.push((key, artifact));
        }
        Ok(expired)
    }

    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1");
        self.query(&sql, &[&group.as_str()])?.first().map(task_group_from_row).transpose()
    }

    fn group_facts(&self, group: TaskId, names: usize) -> Result<GroupFacts, StoreError> {
        let rows = self.query(
            concat!(
                "SELECT (SELECT count(*) FROM tasks WHERE task_group_id = $1), ",
                "(SELECT definition::json -> 'metadata' ->> 'name' FROM tasks WHERE task_id = $1 AND task_group_id = $1), ",
                "(SELECT count(*) FROM tasks u WHERE u.task_group_id = $1 AND ",
                unresolved!("u"),
                "), (SELECT count(*) FROM tasks u WHERE u.task_group_id = $1 AND ",
                unresolved!("u"),
                " AND u.state IN ('pending', 'running')), ",
                "(SELECT count(*) FROM tasks WHERE task_group_id = $1 AND state IN ('failed', 'exception'))"
            ),
            &[&group.as_str()],
        )?;
        let row = rows.first().ok_or_else(|| corrupt("a group's counts"))?;
        let count = |n: usize| -> Result<u64, StoreError> { Ok(row.try_get::<_, i64>(n)? as u64) };
        let counts = GroupCounts { total: count(0)?, unresolved: count(2)?, active: count(3)?, failed: count(4)? };
        let names = self
            .query(
                "SELECT definition::json -> 'metadata' ->> 'name' FROM tasks WHERE task_group_id = $1 \
                 AND task_id <> $1 ORDER BY task_id LIMIT $2",
                &[&group.as_str(), &(names as i64)],
            )?
            .iter()
            .map(|row| row.try_get::<_, Option<String>>(0))
            .filter_map(Result::transpose)
            .collect::<Result<_, _>>()?;
        Ok(GroupFacts { counts, namesake: row.try_get(1)?, names })
    }

    fn recent_groups(&self, before: (i64, &str), limit: usize) -> Result<Vec<RecentGroup>, StoreError> {
        let sql = format!(
            concat!(
                "SELECT {GROUP_COLUMNS}, created, NOT EXISTS (SELECT 1 FROM tasks u WHERE u.task_group_id = g.task_group_id \
                 AND ",
                unresolved!("u"),
                ") FROM task_groups g WHERE (created, task_group_id) < ($1, $2) \
                 ORDER BY created DESC, task_group_id DESC LIMIT $3"
            ),
            GROUP_COLUMNS = GROUP_COLUMNS
        );
        let rows = self.query(&sql, &[&before.0, &before.1, &(limit as i64)])?;
        rows.iter()
            .map(|row| {
                let created: i64 = row.try_get(GROUP_COLUMN_COUNT)?;
                let resolved: bool = row.try_get(GROUP_COLUMN_COUNT + 1)?;
                Ok(RecentGroup { group: task_group_from_row(row)?, created: Timestamp(created), resolved })
            })
            .collect()
    }

    fn recent_graphs(&self, before: (i64, &str), limit: usize) -> Result<Vec<(StoredGraph, Timestamp)>, StoreError> {
        graph::recent(&mut self.0.borrow_mut(), before, limit)
    }

    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
        graph::graph(&mut self.0.borrow_mut(), task_graph_id)
    }

    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<GraphNode>, StoreError> {
        graph::nodes(&mut self.0.borrow_mut(), task_graph_id)
    }

    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let rows = self.query(
            "SELECT first_seq, last_seq, messages FROM outbox_batches WHERE first_seq >= \
             coalesce((SELECT first_seq FROM outbox_batches WHERE first_seq <= $1 ORDER BY first_seq DESC LIMIT 1), 0) \
             ORDER BY first_seq",
            &[&(from as i64)],
        )?;
        let mut entries = Vec::new();
        for row in &rows {
            if entries.len() >= limit {
                break;
            }
            let stored = (row.try_get::<_, i64>(0)? as u64, row.try_get::<_, i64>(1)? as u64, row.try_get(2)?);
            append_row(&mut entries, stored, from, limit)?;
        }
        Ok(entries)
    }

    fn expired_tasks(&self, now: Timestamp, limit: usize) -> Result<Vec<(TaskId, u32)>, StoreError> {
        let rows = self.query(
            "SELECT task_id, json_array_length(runs::json) FROM tasks WHERE expires <= $1 AND deadline_due IS NULL \
             ORDER BY expires LIMIT $2",
            &[&now.millis(), &(limit as i64)],
        )?;
        rows.iter()
            .map(|row| {
                let id: &str = row.try_get(0)?;
                let task_id = TaskId::parse(id).ok_or_else(|| corrupt(format!("task id {id}")))?;
                Ok((task_id, row.try_get::<_, i32>(1)? as u32))
            })
            .collect()
    }

    fn auth(&self, kind: Option<AuthKind>) -> Result<(i64, Vec<String>), StoreError> {
        let rows = self.query("SELECT generation FROM auth_state", &[])?;
        let generation: i64 =
            rows.first().ok_or_else(|| StoreError::Corrupt("no auth_state row".into()))?.try_get(0)?;
        let Some(kind) = kind else { return Ok((generation, Vec::new())) };
        let rows = self.query("SELECT body FROM auth_entities WHERE kind = $1 ORDER BY id", &[&kind.as_str()])?;
        let bodies = rows.iter().map(|row| row.try_get(0)).collect::<Result<_, _>>()?;
        Ok((generation, bodies))
    }

    fn worker(&self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        self.worker_record(key)
    }

    fn workers(&self, task_queue_id: &str, after: (&str, &str), limit: usize) -> Result<Vec<Worker>, StoreError> {
        self.worker_records(task_queue_id, after, limit)
    }

    fn running_by_worker(&self, task_queue_id: &str) -> Result<Vec<(String, TaskId)>, StoreError> {
        self.running_runs(task_queue_id)
    }

    fn worker_events(&self, key: &WorkerKey, before: u64, limit: usize) -> Result<Vec<(u64, WorkerEvent)>, StoreError> {
        self.worker_event_rows(key, before, limit)
    }

    fn worker_claims(
        &self,
        key: &WorkerKey,
        before: (i64, &str),
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        let rows = self.query(
            "SELECT at, task_id, runs FROM worker_runs WHERE task_queue_id = $1 AND worker_group = $2 \
             AND worker_id = $3 AND (at, task_id) < ($4, $5) ORDER BY at DESC, task_id DESC LIMIT $6",
            &[&key.task_queue_id, &key.worker_group, &key.worker_id, &before.0, &before.1, &(limit as i64)],
        )?;
        rows.iter().map(|row| ClaimRecord::decode(row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)).collect()
    }

    fn document(&self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
        self.document_row(kind, key)
    }

    fn documents(
        &self,
        kind: DocKind,
        after: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        self.document_rows(kind, after, end, limit)
    }

    fn due_documents(
        &self,
        kind: DocKind,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        self.due_rows(kind, now, limit)
    }
}

fn queue_info(row: &Row) -> Result<TaskQueueInfo, StoreError> {
    Ok(TaskQueueInfo {
        task_queue_id: row.try_get(0)?,
        expires: Timestamp(row.try_get(1)?),
        last_date_active: Timestamp(row.try_get(2)?),
        description: row.try_get(3)?,
        stability: row.try_get(4)?,
    })
}
