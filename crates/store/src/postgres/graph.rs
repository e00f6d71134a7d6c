//! The task-graph scheduler's rows in PostgreSQL: [`GraphTx`] over a write transaction, and
//! the reads behind `/task-graph/...`. A graph's row is locked (`FOR UPDATE`) before its
//! counts change, so servers resolving its tasks at once count each resolution once.

use postgres::Row;
use shoal_engine::definition::TaskDefinition;
use shoal_engine::graph::{NodeProgress, Tally};
use shoal_engine::message::Message;
use shoal_engine::status::{TaskState, TaskStatus};
use shoal_engine::{TaskId, Timestamp};

use crate::graph::{GraphNode, GraphTx, NewNode, StoredGraph};
use crate::postgres::tx::{Param, PgTx};
use crate::postgres::{PgConn, ops};
use crate::sqlite::row::corrupt;
use crate::sqlite::tx::json;
use crate::{StoreError, TaskGroup};

const GRAPH_COLUMNS: &str = "task_graph_id, scheduler_id, routing, open, failed, metadata, tags";

impl GraphTx for PgTx {
    fn graph_scheduler_id(&self) -> &str {
        &self.shared.graph_scheduler_id
    }

    async fn load_graph(&mut self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
        let sql = format!("SELECT {GRAPH_COLUMNS} FROM task_graphs WHERE task_graph_id = $1 FOR UPDATE");
        self.query_opt(&sql, &[&task_graph_id.as_str()]).await?.map(|row| graph_from_row(&row)).transpose()
    }

    async fn insert_graph(&mut self, graph: &StoredGraph, now: Timestamp) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(graph.task_graph_id.as_str().to_owned()),
            Box::new(graph.scheduler_id.clone()),
            Box::new(graph.routing.clone()),
            Box::new(graph.tally.open as i32),
            Box::new(graph.tally.failed as i32),
            Box::new(json(&graph.metadata)?),
            Box::new(json(&graph.tags)?),
            Box::new(now.millis()),
        ];
        self.defer(
            "INSERT INTO task_graphs (task_graph_id, scheduler_id, routing, open, failed, metadata, tags, created) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params,
        )
        .await
    }

    async fn save_tally(&mut self, task_graph_id: TaskId, tally: Tally) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(task_graph_id.as_str().to_owned()),
            Box::new(tally.open as i32),
            Box::new(tally.failed as i32),
        ];
        self.defer("UPDATE task_graphs SET open = $2, failed = $3 WHERE task_graph_id = $1", params).await
    }

    async fn graph_labels(&mut self, task_graph_id: TaskId) -> Result<Vec<(String, TaskId, String)>, StoreError> {
        let sql = "SELECT label, task_id, submitted FROM graph_tasks WHERE task_graph_id = $1";
        self.query(sql, &[&task_graph_id.as_str()])
            .await?
            .iter()
            .map(|row| Ok((row.try_get(0)?, parse_id(row.try_get(1)?)?, row.try_get(2)?)))
            .collect()
    }

    async fn insert_node(&mut self, node: &NewNode<'_>) -> Result<(), StoreError> {
        let planned = node.planned;
        let params: Vec<Param> = vec![
            Box::new(planned.task_id.as_str().to_owned()),
            Box::new(node.task_graph_id.as_str().to_owned()),
            Box::new(planned.label.clone()),
            Box::new(json(&planned.requires)?),
            Box::new(planned.reruns as i32),
            Box::new(node.submitted.to_owned()),
        ];
        self.defer(
            "INSERT INTO graph_tasks (task_id, task_graph_id, label, requires, reruns, reruns_left, failed, submitted) \
             VALUES ($1, $2, $3, $4, $5, $5, false, $6)",
            params,
        )
        .await
    }

    async fn load_node(&mut self, task_id: TaskId) -> Result<Option<(TaskId, NodeProgress)>, StoreError> {
        let sql = "SELECT task_graph_id, reruns_left, failed FROM graph_tasks WHERE task_id = $1 FOR UPDATE";
        self.query_opt(sql, &[&task_id.as_str()])
            .await?
            .map(|row| {
                let reruns_left: i32 = row.try_get(1)?;
                Ok((
                    parse_id(row.try_get(0)?)?,
                    NodeProgress { reruns_left: reruns_left as u32, failed: row.try_get(2)? },
                ))
            })
            .transpose()
    }

    async fn save_node(&mut self, task_id: TaskId, progress: NodeProgress) -> Result<(), StoreError> {
        let params: Vec<Param> = vec![
            Box::new(task_id.as_str().to_owned()),
            Box::new(progress.reruns_left as i32),
            Box::new(progress.failed),
        ];
        self.defer("UPDATE graph_tasks SET reruns_left = $2, failed = $3 WHERE task_id = $1", params).await
    }

    async fn task_expires(&mut self, task_id: TaskId) -> Result<Option<Timestamp>, StoreError> {
        let row = self.query_opt("SELECT expires FROM tasks WHERE task_id = $1", &[&task_id.as_str()]).await?;
        Ok(row.map(|row| Timestamp(row.get(0))))
    }

    async fn load_task_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        self.load_group(group).await
    }

    async fn create_queue_task(
        &mut self,
        definition: &TaskDefinition,
        task_id: TaskId,
        now: Timestamp,
    ) -> Result<TaskStatus, StoreError> {
        ops::create_task(self, definition, task_id, now).await
    }

    fn publish_message(&mut self, message: Message) {
        self.publish(message);
    }
}

fn graph_from_row(row: &Row) -> Result<StoredGraph, StoreError> {
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

fn parse_id(text: &str) -> Result<TaskId, StoreError> {
    TaskId::parse(text).ok_or_else(|| corrupt(format!("task id {text}")))
}
