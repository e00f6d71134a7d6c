//! Queries over committed state for the read-only endpoints.

use rusqlite::{Connection, Row, params};
use shoal_engine::artifact::Artifact;
use shoal_engine::{TaskId, Timestamp};

use crate::outbox::OutboxEntry;
use crate::page::parse_seq;
use crate::sqlite::row::{self, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row};
use crate::sqlite::{artifacts, graph};
use crate::{
    ArtifactKey, ClaimedRun, Page, PendingListing, QueueCounts, Reads, StoreError, TaskGroup, TaskQueueInfo, TaskRecord,
};

/// A read-only connection seen through the [`Reads`] interface.
pub(crate) struct ReadConn<'a>(pub(crate) &'a Connection);

fn record(row: &Row<'_>) -> Result<TaskRecord, StoreError> {
    let task = task_from_row(row)?.task;
    Ok(TaskRecord { status: task.status(), task: raw_json(row, N_TASK_COLUMNS)? })
}

/// Runs a keyset-paged query: binds (key, after, limit + 1) and turns the extra row into a
/// continuation token made by `token`.
fn page<T>(
    conn: &Connection,
    sql: &str,
    key: &str,
    after: Option<&str>,
    limit: usize,
    mut convert: impl FnMut(&Row<'_>) -> Result<T, StoreError>,
    token: impl Fn(&T) -> String,
) -> Result<Page<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params![key, after.unwrap_or(""), (limit + 1) as i64])?;
    let mut items = Vec::with_capacity(limit.min(1000));
    let mut more = false;
    while let Some(row) = rows.next()? {
        if items.len() == limit {
            more = true;
            break;
        }
        items.push(convert(row)?);
    }
    let continuation = if more { items.last().map(token) } else { None };
    Ok(Page { items, continuation })
}

impl Reads for ReadConn<'_> {
    fn task(&self, task_id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let mut stmt =
            self.0.prepare_cached(&format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = ?1"))?;
        let mut rows = stmt.query([task_id.as_str()])?;
        rows.next()?.map(record).transpose()
    }

    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        row::task_group(self.0, group)
    }

    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<crate::GraphRecord>, StoreError> {
        Ok(graph::graph(self.0, task_graph_id)?.map(crate::ops::graph::StoredGraph::into_record))
    }

    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<crate::GraphNode>, StoreError> {
        graph::nodes(self.0, task_graph_id)
    }

    fn list_task_group(
        &self,
        group: TaskId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let sql = format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_group_id = ?1 AND task_id > ?2 \
             ORDER BY task_id LIMIT ?3"
        );
        page(self.0, &sql, group.as_str(), after, limit, record, |rec| rec.status.task_id.to_string())
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
             WHERE d.required_task_id = ?1 AND d.dependent_task_id > ?2 ORDER BY d.dependent_task_id LIMIT ?3",
            columns.join(", ")
        );
        page(self.0, &sql, task_id.as_str(), after, limit, record, |rec| rec.status.task_id.to_string())
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

    fn list_pending(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<PendingListing>, StoreError> {
        let after_seq = parse_seq(after)?;
        let sql = format!(
            "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_queue_id = ?1 AND state = 'pending' \
             AND pending_seq > CAST(?2 AS INTEGER) ORDER BY pending_seq LIMIT ?3"
        );
        let mut last_seq = 0;
        let after_text = after_seq.to_string();
        page(
            self.0,
            &sql,
            task_queue_id,
            Some(&after_text),
            limit,
            |row| {
                let task_row = task_from_row(row)?;
                last_seq = task_row.pending_seq.unwrap_or(0);
                let run = task_row.task.runs().last().cloned();
                Ok((
                    last_seq,
                    PendingListing {
                        task_id: task_row.task.task_id,
                        run_id: run.as_ref().map_or(0, |run| run.run_id),
                        inserted: run.map_or(Timestamp(0), |run| run.scheduled),
                        task: raw_json(row, N_TASK_COLUMNS)?,
                    },
                ))
            },
            |(seq, _)| seq.to_string(),
        )
        .map(|page| Page {
            items: page.items.into_iter().map(|(_, item)| item).collect(),
            continuation: page.continuation,
        })
    }

    fn list_claimed(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<ClaimedRun>, StoreError> {
        let after_rowid = parse_seq(after)?.to_string();
        let sql = format!(
            "SELECT {TASK_COLUMNS}, definition, rowid FROM tasks WHERE task_queue_id = ?1 AND state = 'running' \
             AND rowid > CAST(?2 AS INTEGER) ORDER BY rowid LIMIT ?3"
        );
        let convert = |row: &Row<'_>| {
            let task = task_from_row(row)?.task;
            let run =
                task.runs().last().cloned().ok_or_else(|| StoreError::Other("running task without runs".into()))?;
            let rowid: i64 = row.get(N_TASK_COLUMNS + 1)?;
            let claimed = ClaimedRun {
                task_id: task.task_id,
                run_id: run.run_id,
                worker_group: run.worker_group.unwrap_or_default(),
                worker_id: run.worker_id.unwrap_or_default(),
                claimed: run.started.unwrap_or(run.scheduled),
                task: raw_json(row, N_TASK_COLUMNS)?,
            };
            Ok((rowid, claimed))
        };
        let page =
            page(self.0, &sql, task_queue_id, Some(&after_rowid), limit, convert, |(rowid, _)| rowid.to_string())?;
        Ok(Page { items: page.items.into_iter().map(|(_, item)| item).collect(), continuation: page.continuation })
    }

    fn list_task_queues(&self, after: Option<&str>, limit: usize) -> Result<Page<TaskQueueInfo>, StoreError> {
        let sql = "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
                   WHERE ?1 = ?1 AND task_queue_id > ?2 ORDER BY task_queue_id LIMIT ?3";
        page(self.0, sql, "", after, limit, queue_info, |queue| queue.task_queue_id.clone())
    }

    fn artifact(&self, task_id: TaskId, run_id: u32, name: &str) -> Result<Option<Artifact>, StoreError> {
        artifacts::artifact(self.0, task_id, run_id, name)
    }

    fn list_artifacts(
        &self,
        task_id: TaskId,
        run_id: u32,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Artifact>, StoreError> {
        artifacts::list(self.0, task_id, run_id, after, limit)
    }

    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
        artifacts::expired(self.0, now, limit)
    }

    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT task_queue_id, expires, last_date_active, description, stability FROM task_queues \
             WHERE task_queue_id = ?1",
        )?;
        let mut rows = stmt.query([task_queue_id])?;
        rows.next()?.map(queue_info).transpose()
    }

    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        crate::sqlite::outbox::read(self.0, from, limit)
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
