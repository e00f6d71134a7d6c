//! Task groups: listing, sealing, canceling and re-prioritizing.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use shoal_engine::TaskId;
use shoal_store::operation::{CancelGroup, ChangeGroupPriority, SealGroup};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params};
use crate::routes::tasks::{NewPriority, parse_priority};
use crate::routes::with_continuation;

fn group_id(params: &Params) -> Result<TaskId, ApiError> {
    params.slugid("group", "taskGroupId")
}

pub(crate) async fn list_task_group(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let group = group_id(&params)?;
    let page = state
        .queue
        .store()
        .read(move |reads| {
            let Some(found) = reads.task_group(group)? else { return Ok(None) };
            let page = reads.list_task_group(group, paging.continuation.as_deref(), paging.limit)?;
            Ok(Some((found, page)))
        })
        .await?;
    let (found, page) = page.ok_or_else(|| ApiError::not_found(format!("task group {group} not found")))?;
    // Taskcluster's answer: the group's own fields (taskGroupResponse's) on every page.
    let mut answer = json!(found);
    answer["tasks"] = json!(page.items);
    Ok(with_continuation(answer, page.continuation))
}

pub(crate) async fn get_task_group(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let group = group_id(&params)?;
    let found = state.queue.store().read(move |reads| reads.task_group(group)).await?;
    let found = found.ok_or_else(|| ApiError::not_found(format!("task group {group} not found")))?;
    Ok(Json(json!(found)))
}

/// Checks the caller's scopes on an existing group (its scheduler's); answers its scheduler.
async fn authorize(state: &AppState, caller: &Caller, group: TaskId) -> Result<String, ApiError> {
    let found = state.queue.store().read(move |reads| reads.task_group(group)).await?;
    let found = found.ok_or_else(|| ApiError::not_found(format!("task group {group} not found")))?;
    caller.authorize(&Vars::new().one("schedulerId", &found.scheduler_id).one("taskGroupId", group))?;
    Ok(found.scheduler_id)
}

pub(crate) async fn seal_task_group(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let group = group_id(&params)?;
    authorize(&state, &caller, group).await?;
    let group = state.queue.run(SealGroup { task_group_id: group }).await?;
    Ok(Json(json!(group)))
}

pub(crate) async fn cancel_task_group(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let group = group_id(&params)?;
    authorize(&state, &caller, group).await?;
    let cancellation = state.queue.run(CancelGroup { task_group_id: group }).await?;
    Ok(Json(json!(cancellation)))
}

pub(crate) async fn change_task_group_priority(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(body): Body<NewPriority>,
) -> Result<Json<Value>, ApiError> {
    let group = group_id(&params)?;
    let priority = parse_priority(&body.new_priority)?;
    let scheduler_id = authorize(&state, &caller, group).await?;
    let task_ids = state.queue.run(ChangeGroupPriority { task_group_id: group, priority }).await?;
    Ok(Json(json!({
        "taskGroupId": group,
        "schedulerId": scheduler_id,
        "newPriority": priority,
        "tasksAffected": task_ids.len(),
        "taskIds": task_ids,
    })))
}
