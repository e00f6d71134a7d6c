//! The task-graph scheduler (seed 000) under `/api/scheduler/v1`: create and extend graphs,
//! and their status, info and inspection.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shoal_engine::graph::{ExtensionInput, GraphInput, Labelled};
use shoal_engine::priority::Priority;
use shoal_engine::status::TaskState;
use shoal_engine::{Rejection, TaskId};
use shoal_store::operation::{CreateGraph, ExtendGraph};
use shoal_store::{GraphNode, GraphRecord, GraphRequest};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Paging, Params, parse_json};

/// Largest graph submission: a graph holds up to 20,000 task definitions.
pub(crate) const MAX_GRAPH_BYTES: usize = 64 * 1024 * 1024;

fn graph_id(params: &Params) -> Result<TaskId, ApiError> {
    params.slugid("graph", "taskGraphId")
}

fn body<T: serde::de::DeserializeOwned>(bytes: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes =
        bytes.map_err(|_| ApiError::too_large(format!("request body must be at most {MAX_GRAPH_BYTES} bytes")))?;
    parse_json(&bytes)
}

/// What createTask's scopes need of a submitted task, as submitted.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubmittedTask {
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
    project_id: Option<String>,
    task_queue_id: Option<String>,
    provisioner_id: Option<String>,
    worker_type: Option<String>,
    #[serde(default)]
    priority: Option<Value>,
}

/// Checks that the caller may create every task of a submission, as the graph's scheduler
/// would create them. Placeholders are refused outside payloads first, so what is read here
/// is what will be created; a field read here that is malformed is refused here, naming it.
fn authorize_tasks(state: &AppState, caller: &Caller, graph: TaskId, tasks: &Labelled) -> Result<(), ApiError> {
    shoal_engine::graph::check_submission(tasks)?;
    let scheduler_id = state.queue.store().graph_scheduler_id();
    let mut records = Vec::with_capacity(tasks.0.len());
    for (label, node) in &tasks.0 {
        let task: SubmittedTask = serde_path_to_error::deserialize(&node.task).map_err(|err| {
            let path = err.path().to_string();
            let at = if path == "." { format!("tasks.{label}.task") } else { format!("tasks.{label}.task.{path}") };
            Rejection::invalid(at, err.into_inner().to_string())
        })?;
        let task_queue_id = match (task.task_queue_id, task.provisioner_id, task.worker_type) {
            (Some(id), _, _) => id,
            (None, Some(provisioner), Some(worker_type)) => format!("{provisioner}/{worker_type}"),
            _ => String::new(),
        };
        let priority = match task.priority {
            Some(value) => Priority::parse(&format!("tasks.{label}.task.priority"), &value)?,
            None => Priority::LOWEST,
        };
        records.push(
            Vars::new()
                .many("scopes", task.scopes)
                .many("routes", task.routes)
                .one("projectId", task.project_id.unwrap_or_else(|| "none".to_owned()))
                .one("schedulerId", scheduler_id)
                .one("taskQueueId", task_queue_id)
                .many("priorities", priority.scope_names()),
        );
    }
    caller.authorize(&Vars::new().one("taskGraphId", graph.to_string()).records("tasks", records))
}

/// The scope to extend graph `graph`, which its submitter holds through it (so a task of
/// the graph, its decision task, may be given it).
fn extend_scope(graph: TaskId) -> String {
    format!("scheduler:extend-task-graph:{graph}")
}

/// `PUT /task-graph/<taskGraphId>`: creates the graph and its tasks.
pub(crate) async fn create_task_graph(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let task_graph_id = graph_id(&params)?;
    let input: GraphInput = body(bytes)?;
    authorize_tasks(&state, &caller.holding(extend_scope(task_graph_id)), task_graph_id, &input.tasks)?;
    let created_by = caller.client_id.clone();
    let status = state.queue.run(CreateGraph { request: GraphRequest { task_graph_id, input, created_by } }).await?;
    Ok(Json(json!({ "status": status })))
}

/// `POST /task-graph/<taskGraphId>/extend`: adds tasks.
pub(crate) async fn extend_task_graph(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let task_graph_id = graph_id(&params)?;
    let input: ExtensionInput = body(bytes)?;
    authorize_tasks(&state, &caller, task_graph_id, &input.tasks)?;
    let status = state.queue.run(ExtendGraph { task_graph_id, input, created_by: caller.client_id.clone() }).await?;
    Ok(Json(json!({ "status": status })))
}

async fn record(state: &AppState, task_graph_id: TaskId) -> Result<GraphRecord, ApiError> {
    let found = state.queue.store().read(move |reads| reads.task_graph(task_graph_id)).await?;
    found.ok_or_else(|| ApiError::not_found(format!("task graph {task_graph_id} not found")))
}

/// `GET /task-graph/<taskGraphId>/status`.
pub(crate) async fn status(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let record = record(&state, graph_id(&params)?).await?;
    Ok(Json(json!({ "status": record.status })))
}

/// `GET /task-graph/<taskGraphId>/info`: status, metadata and tags.
pub(crate) async fn info(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let record = record(&state, graph_id(&params)?).await?;
    Ok(Json(json!(record)))
}

/// `GET /task-graphs`: graphs, newest first, each as `/info` shows it with its creation time.
pub(crate) async fn list_task_graphs(State(state): State<AppState>, paging: Paging) -> Result<Json<Value>, ApiError> {
    let page = state
        .queue
        .store()
        .read(move |reads| reads.list_task_graphs(paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(crate::routes::with_continuation(json!({ "taskGraphs": page.items }), page.continuation))
}

/// One task as `/inspect` shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeView {
    label: String,
    task_id: TaskId,
    name: String,
    /// TaskIds of the tasks it requires.
    requires: Vec<TaskId>,
    /// Those of them not completed yet.
    requires_left: Vec<TaskId>,
    /// TaskIds of the graph's tasks that require it.
    dependents: Vec<TaskId>,
    reruns: u32,
    reruns_left: u32,
    /// The queue's state of the task.
    state: TaskState,
    /// Completed: it no longer holds its dependents back.
    satisfied: bool,
}

/// Every task with what it requires and what requires it.
fn views(nodes: Vec<GraphNode>) -> Vec<NodeView> {
    let by_label: HashMap<&str, (TaskId, TaskState)> =
        nodes.iter().map(|node| (node.label.as_str(), (node.task_id, node.state))).collect();
    let mut dependents: HashMap<&str, Vec<TaskId>> = HashMap::new();
    for node in &nodes {
        for required in &node.requires {
            dependents.entry(required.as_str()).or_default().push(node.task_id);
        }
    }
    nodes
        .iter()
        .map(|node| {
            let requires: Vec<(TaskId, TaskState)> =
                node.requires.iter().filter_map(|label| by_label.get(label.as_str()).copied()).collect();
            NodeView {
                label: node.label.clone(),
                task_id: node.task_id,
                name: node.name.clone(),
                requires_left: requires
                    .iter()
                    .filter(|(_, state)| *state != TaskState::Completed)
                    .map(|(task_id, _)| *task_id)
                    .collect(),
                requires: requires.iter().map(|(task_id, _)| *task_id).collect(),
                dependents: dependents.get(node.label.as_str()).cloned().unwrap_or_default(),
                reruns: node.reruns,
                reruns_left: node.progress.reruns_left,
                state: node.state,
                satisfied: node.state == TaskState::Completed,
            }
        })
        .collect()
}

async fn inspected(state: &AppState, task_graph_id: TaskId) -> Result<(GraphRecord, Vec<NodeView>), ApiError> {
    let found = state
        .queue
        .store()
        .read(move |reads| {
            let Some(record) = reads.task_graph(task_graph_id)? else { return Ok(None) };
            Ok(Some((record, reads.graph_nodes(task_graph_id)?)))
        })
        .await?;
    let (record, nodes) = found.ok_or_else(|| ApiError::not_found(format!("task graph {task_graph_id} not found")))?;
    Ok((record, views(nodes)))
}

/// `GET /task-graph/<taskGraphId>/inspect`: the graph and every task in it.
pub(crate) async fn inspect(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let (record, tasks) = inspected(&state, graph_id(&params)?).await?;
    Ok(Json(json!({
        "status": record.status,
        "metadata": record.metadata,
        "tags": record.tags,
        "tasks": tasks,
    })))
}

/// `GET /task-graph/<taskGraphId>/inspect/<taskId>`: one task of the graph.
pub(crate) async fn inspect_task(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_graph_id = graph_id(&params)?;
    let task_id = params.task_id()?;
    let (_, tasks) = inspected(&state, task_graph_id).await?;
    let node = tasks
        .into_iter()
        .find(|node| node.task_id == task_id)
        .ok_or_else(|| ApiError::not_found(format!("task {task_id} is not in task graph {task_graph_id}")))?;
    Ok(Json(json!(node)))
}
