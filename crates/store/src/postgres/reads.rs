//! Queries over committed state for the read-only endpoints, on PostgreSQL.

use std::cell::RefCell;

use postgres::Row;
use postgres::types::ToSql;
use shoal_engine::artifact::Artifact;
use shoal_engine::{TaskId, Timestamp};

use crate::outbox::OutboxEntry;
use crate::outbox::format::append_row;
use crate::page::parse_seq;
use crate::postgres::row::{GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row, task_group_from_row};
use crate::postgres::{PgConn, artifacts, graph};
use crate::{
    ArtifactKey, ClaimedRun, Page, PendingListing, QueueCounts, Reads, StoreError, TaskGroup, TaskQueueInfo, TaskRecord,
};

/// A pooled connection seen through the [`Reads`] interface.
pub(crate) struct PgReads<'a>(pub(crate) RefCell<&'a mut PgConn>);

fn record(row: &Row) -> Result<TaskRecord, StoreError> {
    let task = task_from_row(row)?.task;
    Ok(TaskRecord { status: task.status(), task: raw_json(row, N_TASK_COLUMNS)? })
}

impl PgReads<'_> {
    fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        Ok(self.0.borrow_mut().query(sql, params)?)
    }

    /// Keyset paging: `rows` holds up to limit + 1 rows; the extra one makes a token.
    fn page<T>(
        rows: Vec<Row>,
        limit: usize,
        convert: impl Fn(&Row) -> Result<T, StoreError>,
        token: impl Fn(&T) -> String,
    ) -> Result<Page<T>, StoreError> {
        let more = rows.len() > limit;
        let items = rows.iter().take(limit).map(convert).collect::<Result<Vec<_>, _>>()?;
        let continuation = if more { items.last().map(token) } else { None };
        Ok(Page { items, continuation })
    }
}

impl Reads for PgReads<'_> {
    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<crate::GraphRecord>, StoreError> {
        Ok(graph::graph(&mut self.0.borrow_mut(), task_graph_id)?.map(crate::ops::graph::StoredGraph::into_record))
    }

    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<crate::GraphNode>, StoreError> {
        graph::nodes(&mut self.0.borrow_mut(), task_graph_id)
    }

    fn task(&self, task_id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = $1");
        self.query(&sql, &[&task_id.as_str()])?.first().map(record).transpose()
    }

    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1");
        self.query(&sql, &[&group.as_str()])?.first().map(task_group_from_row).transpose()
    }

    fn list_task_group(
        &self,
        group: TaskId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let sql = format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_group_id = $1 AND task_id > $2 \
             ORDER BY task_id LIMIT $3"
        );
        let rows = self.query(&sql, &[&group.as_str(), &after.unwrap_or(""), &((limit + 1) as i64)])?;
        Self::page(rows, limit, record, |rec| rec.status.task_id.to_string())
    }

    fn list_dependents(
        &self,
        task_id: TaskId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let columns: Vec<String> = TASK_COLUMNS.split(", ").map(|c| format!("t.{c}")).collect();
        let sql = format!(
            "SELECT {}, t.definition FROM task_dependencies d JOIN tasks t ON t.task_id = d.dependent_task_id \
             WHERE d.required_task_id = $1 AND d.dependent_task_id > $2 ORDER BY d.dependent_task_id LIMIT $3",
            columns.join(", ")
        );
        let rows = self.query(&sql, &[&task_id.as_str(), &after.unwrap_or(""), &((limit + 1) as i64)])?;
        Self::page(rows, limit, record, |rec| rec.status.task_id.to_string())
    }

    fn queue_counts(&self, task_queue_id: &str) -> Result<QueueCounts, StoreError> {
        let rows = self.query(
            "SELECT (SELECT count(*) FROM tasks WHERE task_queue_id = $1 AND state = 'pending'), \
             (SELECT count(*) FROM tasks WHERE taken_until IS NOT NULL AND task_queue_id = $1 AND state = 'running')",
            &[&task_queue_id],
        )?;
        let row = rows.first().ok_or_else(|| StoreError::Other("no count".into()))?;
        Ok(QueueCounts { pending_tasks: row.get::<_, i64>(0) as u64, claimed_tasks: row.get::<_, i64>(1) as u64 })
    }

    fn list_pending(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<PendingListing>, StoreError> {
        let sql = format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_queue_id = $1 AND state = 'pending' \
             AND pending_seq > $2 ORDER BY pending_seq LIMIT $3"
        );
        let rows = self.query(&sql, &[&task_queue_id, &(parse_seq(after)? as i64), &((limit + 1) as i64)])?;
        let convert = |row: &Row| {
            let task_row = task_from_row(row)?;
            let run = task_row.task.runs().last().cloned();
            let listing = PendingListing {
                task_id: task_row.task.task_id,
                run_id: run.as_ref().map_or(0, |run| run.run_id),
                inserted: run.map_or(Timestamp(0), |run| run.scheduled),
                task: raw_json(row, N_TASK_COLUMNS)?,
            };
            Ok((task_row.pending_seq.unwrap_or(0), listing))
        };
        let page = Self::page(rows, limit, convert, |(seq, _)| seq.to_string())?;
        Ok(Page { items: page.items.into_iter().map(|(_, item)| item).collect(), continuation: page.continuation })
    }

    fn list_claimed(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<ClaimedRun>, StoreError> {
        // Keyed by task id: PostgreSQL has no stable row order to page by. Running tasks are
        // found by tasks_taken_until (migration 6): they are the rows with a claim-expiry time.
        let sql = format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE taken_until IS NOT NULL AND task_queue_id = $1 \
             AND state = 'running' \
             AND task_id > $2 ORDER BY task_id LIMIT $3"
        );
        let rows = self.query(&sql, &[&task_queue_id, &after.unwrap_or(""), &((limit + 1) as i64)])?;
        let convert = |row: &Row| {
            let task = task_from_row(row)?.task;
            let run =
                task.runs().last().cloned().ok_or_else(|| StoreError::Other("running task without runs".into()))?;
            Ok(ClaimedRun {
                task_id: task.task_id,
                run_id: run.run_id,
                worker_group: run.worker_group.unwrap_or_default(),
                worker_id: run.worker_id.unwrap_or_default(),
                claimed: run.started.unwrap_or(run.scheduled),
                task: raw_json(row, N_TASK_COLUMNS)?,
            })
        };
        Self::page(rows, limit, convert, |claimed| claimed.task_id.to_string())
    }

    fn list_task_queues(&self, after: Option<&str>, limit: usize) -> Result<Page<TaskQueueInfo>, StoreError> {
        let rows = self.query(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id > $1 ORDER BY task_queue_id LIMIT $2",
            &[&after.unwrap_or(""), &((limit + 1) as i64)],
        )?;
        Self::page(rows, limit, queue_info, |queue| queue.task_queue_id.clone())
    }

    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError> {
        let rows = self.query(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id = $1",
            &[&task_queue_id],
        )?;
        rows.first().map(queue_info).transpose()
    }

    fn artifact(&self, task_id: TaskId, run_id: u32, name: &str) -> Result<Option<Artifact>, StoreError> {
        artifacts::artifact(&mut self.0.borrow_mut(), task_id, run_id, name)
    }

    fn list_artifacts(
        &self,
        task_id: TaskId,
        run_id: u32,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Artifact>, StoreError> {
        artifacts::list(&mut self.0.borrow_mut(), task_id, run_id, after, limit)
    }

    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
        artifacts::expired(&mut self.0.borrow_mut(), now, limit)
    }

    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let rows = self.query(
            "SELECT first_seq, last_seq, messages FROM outbox_batches WHERE first_seq >= \
             coalesce((SELECT first_seq FROM outbox_batches WHERE first_seq <= $1 ORDER BY first_seq DESC LIMIT 1), 0) ORDER BY first_seq",
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
