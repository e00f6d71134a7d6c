//! The task-graph scheduler's rows in SQLite: the writes `ops::graph` is made of, and the
//! reads behind `/task-graph/...`.

use rusqlite::{Connection, OptionalExtension, Row, params};
use shoal_engine::graph::{NodeProgress, Tally};
use shoal_engine::status::TaskState;
use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::ops::graph::{GraphNode, NewNode, StoredGraph};
use crate::row::{corrupt, json};

const GRAPH_COLUMNS: &str = "task_graph_id, scheduler_id, routing, open, failed, metadata, tags";

/// Inserts a graph's row.
pub(crate) fn insert(conn: &Connection, graph: &StoredGraph, now: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO task_graphs (task_graph_id, scheduler_id, routing, open, failed, metadata, tags, created) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        graph.task_graph_id.as_str(),
        graph.scheduler_id,
        graph.routing,
        graph.tally.open,
        graph.tally.failed,
        json(&graph.metadata)?,
        json(&graph.tags)?,
        now.millis(),
    ])?;
    Ok(())
}

/// Writes a graph's counts.
pub(crate) fn save_tally(conn: &Connection, task_graph_id: TaskId, tally: Tally) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE task_graphs SET open = ?2, failed = ?3 WHERE task_graph_id = ?1")?.execute(params![
        task_graph_id.as_str(),
        tally.open,
        tally.failed
    ])?;
    Ok(())
}

/// Each label of a graph with its taskId and its submitted JSON.
pub(crate) fn labels(conn: &Connection, task_graph_id: TaskId) -> Result<Vec<(String, TaskId, String)>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT label, task_id, submitted FROM graph_tasks WHERE task_graph_id = ?1")?;
    let rows = stmt.query_map([task_graph_id.as_str()], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
    })?;
    rows.map(|found| {
        let (label, task_id, submitted) = found?;
        Ok((label, parse_id(&task_id)?, submitted))
    })
    .collect()
}

/// Inserts a labelled task's row.
pub(crate) fn insert_node(conn: &Connection, node: &NewNode<'_>) -> Result<(), StoreError> {
    let planned = node.planned;
    conn.prepare_cached(
        "INSERT INTO graph_tasks (task_id, task_graph_id, label, requires, reruns, reruns_left, failed, submitted) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0, ?6)",
    )?
    .execute(params![
        planned.task_id.as_str(),
        node.task_graph_id.as_str(),
        planned.label,
        json(&planned.requires)?,
        planned.reruns,
        node.submitted,
    ])?;
    Ok(())
}

/// The graph and progress of a labelled task.
pub(crate) fn node(conn: &Connection, task_id: TaskId) -> Result<Option<(TaskId, NodeProgress)>, StoreError> {
    let found: Option<(String, u32, bool)> = conn
        .prepare_cached("SELECT task_graph_id, reruns_left, failed FROM graph_tasks WHERE task_id = ?1")?
        .query_row([task_id.as_str()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    found.map(|(graph, reruns_left, failed)| Ok((parse_id(&graph)?, NodeProgress { reruns_left, failed }))).transpose()
}

/// Writes a labelled task's progress.
pub(crate) fn save_node(conn: &Connection, task_id: TaskId, progress: NodeProgress) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE graph_tasks SET reruns_left = ?2, failed = ?3 WHERE task_id = ?1")?
        .execute(params![task_id.as_str(), progress.reruns_left, progress.failed])?;
    Ok(())
}

/// A graph's row.
pub(crate) fn graph(conn: &Connection, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {GRAPH_COLUMNS} FROM task_graphs WHERE task_graph_id = ?1"))?;
    let mut rows = stmt.query([task_graph_id.as_str()])?;
    rows.next()?.map(graph_from_row).transpose()
}

/// Graphs created before `before` (`(created, id)`), newest first, at most `limit`.
pub(crate) fn recent(
    conn: &Connection,
    before: (i64, &str),
    limit: usize,
) -> Result<Vec<(StoredGraph, Timestamp)>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {GRAPH_COLUMNS}, created FROM task_graphs WHERE (created, task_graph_id) < (?1, ?2) \
         ORDER BY created DESC, task_graph_id DESC LIMIT ?3"
    ))?;
    let mut rows = stmt.query(rusqlite::params![before.0, before.1, limit as i64])?;
    let mut found = Vec::new();
    while let Some(row) = rows.next()? {
        found.push((graph_from_row(row)?, Timestamp(row.get(7)?)));
    }
    Ok(found)
}

fn graph_from_row(row: &Row<'_>) -> Result<StoredGraph, StoreError> {
    let metadata: String = row.get(5)?;
    let tags: String = row.get(6)?;
    Ok(StoredGraph {
        task_graph_id: parse_id(&row.get::<_, String>(0)?)?,
        scheduler_id: row.get(1)?,
        routing: row.get(2)?,
        tally: Tally { open: row.get(3)?, failed: row.get(4)? },
        metadata: serde_json::from_str(&metadata).map_err(corrupt)?,
        tags: serde_json::from_str(&tags).map_err(corrupt)?,
    })
}

/// Every task of a graph, by label, with the queue's state of each.
pub(crate) fn nodes(conn: &Connection, task_graph_id: TaskId) -> Result<Vec<GraphNode>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT g.label, g.task_id, coalesce(json_extract(t.definition, '$.metadata.name'), ''), g.requires, \
         g.reruns, g.reruns_left, g.failed, t.state \
         FROM graph_tasks g JOIN tasks t ON t.task_id = g.task_id WHERE g.task_graph_id = ?1 ORDER BY g.label",
    )?;
    let mut rows = stmt.query([task_graph_id.as_str()])?;
    let mut nodes = Vec::new();
    while let Some(row) = rows.next()? {
        let requires: String = row.get(3)?;
        let state: String = row.get(7)?;
        nodes.push(GraphNode {
            label: row.get(0)?,
            task_id: parse_id(&row.get::<_, String>(1)?)?,
            name: row.get(2)?,
            requires: serde_json::from_str(&requires).map_err(corrupt)?,
            reruns: row.get(4)?,
            progress: NodeProgress { reruns_left: row.get(5)?, failed: row.get(6)? },
            state: TaskState::from_name(&state).ok_or_else(|| corrupt(format!("task state {state}")))?,
        });
    }
    Ok(nodes)
}

fn parse_id(text: &str) -> Result<TaskId, StoreError> {
    TaskId::parse(text).ok_or_else(|| corrupt(format!("task id {text}")))
}
