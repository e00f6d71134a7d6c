//! The task-graph scheduler's rows in PostgreSQL: row conversion and the reads behind
//! `/task-graph/...` (the writes are in `domains.rs`).

use postgres::Row;
use shoal_engine::graph::{NodeProgress, Tally};
use shoal_engine::status::TaskState;
use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::ops::graph::{GraphNode, StoredGraph};
use crate::postgres::PgConn;
use crate::row::corrupt;

/// The columns [`graph_from_row`] reads.
pub(crate) const GRAPH_COLUMNS: &str = "task_graph_id, scheduler_id, routing, open, failed, metadata, tags";

/// Graphs created before `before` (`(created, id)`), newest first, at most `limit`.
pub(crate) fn recent(
    conn: &mut PgConn,
    before: (i64, &str),
    limit: usize,
) -> Result<Vec<(StoredGraph, Timestamp)>, StoreError> {
    let sql = format!(
        "SELECT {GRAPH_COLUMNS}, created FROM task_graphs WHERE (created, task_graph_id) < ($1, $2) \
         ORDER BY created DESC, task_graph_id DESC LIMIT $3"
    );
    conn.query(&sql, &[&before.0, &before.1, &(limit as i64)])?
        .iter()
        .map(|row| Ok((graph_from_row(row)?, Timestamp(row.try_get(7)?))))
        .collect()
}

/// A graph from the columns [`GRAPH_COLUMNS`].
pub(crate) fn graph_from_row(row: &Row) -> Result<StoredGraph, StoreError> {
    let open: i32 = row.try_get(3)?;
    let failed: i32 = row.try_get(4)?;
    Ok(StoredGraph {
        task_graph_id: parse_id(row.try_get(0)?)?,
        scheduler_id: row.try_get(1)?,
        routing: row.try_get(2)?,
        tally: Tally { open: open as u32, failed: failed as u32 },
        metadata: serde_json::from_str(row.try_get(5)?).map_err(corrupt)?,
        tags: serde_json::from_str(row.try_get(6)?).map_err(corrupt)?,
    })
}

/// A graph's row, unlocked.
pub(crate) fn graph(conn: &mut PgConn, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
    let sql = format!("SELECT {GRAPH_COLUMNS} FROM task_graphs WHERE task_graph_id = $1");
    conn.query(&sql, &[&task_graph_id.as_str()])?.first().map(graph_from_row).transpose()
}

/// Every task of a graph, by label, with the queue's state of each.
pub(crate) fn nodes(conn: &mut PgConn, task_graph_id: TaskId) -> Result<Vec<GraphNode>, StoreError> {
    let sql = "SELECT g.label, g.task_id, coalesce(t.definition::jsonb -> 'metadata' ->> 'name', ''), g.requires, \
         g.reruns, g.reruns_left, g.failed, t.state \
         FROM graph_tasks g JOIN tasks t ON t.task_id = g.task_id WHERE g.task_graph_id = $1 ORDER BY g.label";
    conn.query(sql, &[&task_graph_id.as_str()])?
        .iter()
        .map(|row| {
            let state: &str = row.try_get(7)?;
            let reruns: i32 = row.try_get(4)?;
            let reruns_left: i32 = row.try_get(5)?;
            Ok(GraphNode {
                label: row.try_get(0)?,
                task_id: parse_id(row.try_get(1)?)?,
                name: row.try_get(2)?,
                requires: serde_json::from_str(row.try_get(3)?).map_err(corrupt)?,
                reruns: reruns as u32,
                progress: NodeProgress { reruns_left: reruns_left as u32, failed: row.try_get(6)? },
                state: TaskState::from_name(state).ok_or_else(|| corrupt(format!("task state {state}")))?,
            })
        })
        .collect()
}

pub(crate) fn parse_id(text: &str) -> Result<TaskId, StoreError> {
    TaskId::parse(text).ok_or_else(|| corrupt(format!("task id {text}")))
}
