//! Task resources: definitions, statuses, creation and the per-task commands.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use shoal_engine::TaskId;
use shoal_engine::command::TaskCommand;
use shoal_engine::definition::{TaskDefinition, TaskDefinitionInput};
use shoal_engine::priority::Priority;
use shoal_engine::result::TaskResult;
use shoal_engine::status::TaskStatus;
use shoal_store::operation::{Apply, CreateTask};
use shoal_store::{Page, StoreError, TaskRecord};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params, RawBody, parse_json};
use crate::routes::{StatusBody, status_body, with_continuation};

/// Most ids one tasks/statuses call may name.
const MAX_BATCH_IDS: usize = 1000;

pub(crate) async fn get_task(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_id = params.task_id()?;
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    Ok(Json(serde_json::to_value(&record.task).map_err(|err| StoreError::Internal(err.to_string()))?))
}

pub(crate) async fn get_status(State(state): State<AppState>, params: Params) -> Result<Json<StatusBody>, ApiError> {
    let task_id = params.task_id()?;
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    Ok(status_body(record.status))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskIds {
    task_ids: Vec<String>,
}

/// The ids a tasks/statuses call names, each once, in their first order.
fn parse_ids(body: &TaskIds) -> Result<Vec<TaskId>, ApiError> {
    if body.task_ids.len() > MAX_BATCH_IDS {
        return Err(ApiError::invalid_input(format!("taskIds: must have at most {MAX_BATCH_IDS} items")));
    }
    let mut seen = std::collections::HashSet::with_capacity(body.task_ids.len());
    let mut ids = Vec::with_capacity(body.task_ids.len());
    for (idx, text) in body.task_ids.iter().enumerate() {
        let task_id = TaskId::parse(text)
            .ok_or_else(|| ApiError::invalid_input(format!("taskIds[{idx}]: `{text}` is not a slugid")))?;
        if seen.insert(task_id) {
            ids.push(task_id);
        }
    }
    Ok(ids)
}

/// A page of the known tasks among the body's ids (unknown ones are left out, as Taskcluster
/// does), held to the same bound as any page of definitions.
async fn known_records(state: &AppState, body: &TaskIds, paging: Paging) -> Result<Page<TaskRecord>, ApiError> {
    let ids = parse_ids(body)?;
    let Paging { continuation, limit } = paging;
    let page = state.queue.store().read(move |reads| reads.tasks_by_id(&ids, continuation.as_deref(), limit)).await?;
    Ok(page)
}

pub(crate) async fn get_tasks(
    State(state): State<AppState>,
    paging: Paging,
    Body(body): Body<TaskIds>,
) -> Result<Json<Value>, ApiError> {
    let page = known_records(&state, &body, paging).await?;
    let tasks: Vec<Value> =
        page.items.into_iter().map(|record| json!({ "taskId": record.status.task_id, "task": record.task })).collect();
    Ok(with_continuation(json!({ "tasks": tasks }), page.continuation))
}

pub(crate) async fn get_statuses(
    State(state): State<AppState>,
    paging: Paging,
    Body(body): Body<TaskIds>,
) -> Result<Json<Value>, ApiError> {
    let page = known_records(&state, &body, paging).await?;
    let statuses: Vec<Value> = page
        .items
        .into_iter()
        .map(|record| json!({ "taskId": record.status.task_id, "status": record.status }))
        .collect();
    Ok(with_continuation(json!({ "statuses": statuses }), page.continuation))
}

/// Shoal's facts about a task beyond its status (Swarming's task result).
pub(crate) async fn get_result(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_id = params.task_id()?;
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    Ok(Json(json!(TaskResult::of(&record.status))))
}

/// [`get_result`] for several tasks, as `statuses` pages them.
pub(crate) async fn get_results(
    State(state): State<AppState>,
    paging: Paging,
    Body(body): Body<TaskIds>,
) -> Result<Json<Value>, ApiError> {
    let page = known_records(&state, &body, paging).await?;
    let results: Vec<TaskResult<'_>> = page.items.iter().map(|record| TaskResult::of(&record.status)).collect();
    Ok(with_continuation(json!({ "results": results }), page.continuation))
}

/// Why a task made on a role's behalf (a hook's fire, a push's build) cannot be created.
pub(crate) enum Unmade {
    /// The definition breaks createTask's rules.
    Invalid(String),
    /// The role's scopes lack this (the scope expression left unsatisfied).
    Unauthorized(String),
}

/// `task` checked as createTask checks one, against the scopes `held` (a role's, not a
/// caller's): its definition, or why it cannot be created.
pub(crate) fn checked_for_role(
    task: Value,
    task_id: TaskId,
    now: shoal_engine::Timestamp,
    held: &shoal_engine::auth::scope::ScopeSet,
) -> Result<TaskDefinition, Unmade> {
    let definition = serde_json::from_value::<TaskDefinitionInput>(task)
        .map_err(|err| shoal_engine::Rejection::invalid("task", err.to_string()))
        .and_then(|input| input.validate(task_id, now))
        .map_err(|rejection| Unmade::Invalid(format!("createTask: {rejection}")))?;
    let required = crate::endpoints::CREATE_TASK
        .render(&create_task_vars(&definition))
        .map_err(|err| Unmade::Invalid(format!("createTask's scopes: {err}")))?;
    match required.unsatisfied(held) {
        Some(missing) => Err(Unmade::Unauthorized(missing.to_string())),
        None => Ok(definition),
    }
}

/// What createTask's scopes are filled in with for `definition`.
pub(crate) fn create_task_vars(definition: &TaskDefinition) -> Vars {
    Vars::new()
        .many("scopes", definition.scopes.clone())
        .many("routes", definition.routes.clone())
        .one("projectId", &definition.project_id)
        .one("schedulerId", &definition.scheduler_id)
        .one("taskQueueId", &definition.task_queue_id)
        .many("priorities", definition.priority.scope_names())
}

pub(crate) async fn create_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    RawBody(body): RawBody,
) -> Result<Json<StatusBody>, ApiError> {
    let task_id = params.task_id()?;
    let input: TaskDefinitionInput = parse_json(&body)?;
    let mut definition = input.validate(task_id, shoal_service::now())?;
    caller.authorize(&create_task_vars(&definition))?;
    definition.created_by.clone_from(&caller.client_id);
    let status = state.queue.run(CreateTask { definition, task_id }).await?;
    Ok(status_body(status))
}

/// A task's status, which must exist (for the scopes of commands on it).
pub(crate) async fn status_of(state: &AppState, task_id: TaskId) -> Result<TaskStatus, ApiError> {
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    Ok(record.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?.status)
}

/// What the scopes of a command on a task are filled in with.
pub(crate) fn task_vars(status: &TaskStatus) -> Vars {
    Vars::new()
        .one("taskId", status.task_id)
        .one("schedulerId", &status.scheduler_id)
        .one("taskGroupId", status.task_group_id)
        .one("projectId", &status.project_id)
        .one("taskQueueId", &status.task_queue_id)
}

async fn command(
    state: &AppState,
    caller: &Caller,
    params: &Params,
    command: TaskCommand,
) -> Result<Json<StatusBody>, ApiError> {
    let task_id = params.task_id()?;
    caller.authorize(&task_vars(&status_of(state, task_id).await?))?;
    let status = state.queue.run(Apply { task_id, command }).await?;
    Ok(status_body(status))
}

pub(crate) async fn schedule_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<StatusBody>, ApiError> {
    command(&state, &caller, &params, TaskCommand::Schedule).await
}

pub(crate) async fn rerun_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<StatusBody>, ApiError> {
    command(&state, &caller, &params, TaskCommand::Rerun).await
}

pub(crate) async fn cancel_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<StatusBody>, ApiError> {
    command(&state, &caller, &params, TaskCommand::Cancel).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct NewPriority {
    pub(crate) new_priority: Value,
}

pub(crate) async fn change_task_priority(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<NewPriority>,
) -> Result<Json<StatusBody>, ApiError> {
    let priority = parse_priority(&body.new_priority)?;
    command(&state, &caller, &params, TaskCommand::ChangePriority(priority)).await
}

pub(crate) fn parse_priority(value: &Value) -> Result<Priority, ApiError> {
    Ok(Priority::parse("newPriority", value)?)
}

pub(crate) async fn list_dependent_tasks(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let task_id = params.task_id()?;
    let page = state
        .queue
        .store()
        .read(move |reads| {
            if reads.task(task_id)?.is_none() {
                return Ok(None);
            }
            reads.list_dependents(task_id, paging.continuation.as_deref(), paging.limit).map(Some)
        })
        .await?;
    let page = page.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    Ok(with_continuation(json!({ "taskId": task_id, "tasks": page.items }), page.continuation))
}
