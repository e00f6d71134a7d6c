//! Taskcluster's provisioners and worker types: the task queues, seen by their two halves.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use shoal_store::TaskQueueInfo;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{Paging, Params};
use crate::routes::with_continuation;

/// Most task queues read to answer one of these listings.
const MAX_QUEUES: usize = 100_000;

/// Every task queue (up to [`MAX_QUEUES`]) whose id starts with `prefix`, by id.
async fn queues(state: &AppState, prefix: String) -> Result<Vec<TaskQueueInfo>, ApiError> {
    let found = state
        .queue
        .store()
        .read(move |reads| {
            let mut all = Vec::new();
            let mut after = (!prefix.is_empty()).then(|| prefix.clone());
            loop {
                let page = reads.list_task_queues(after.as_deref(), 1000)?;
                let done = page.continuation.is_none();
                let past = page.items.iter().any(|queue| !queue.task_queue_id.starts_with(&prefix));
                all.extend(page.items.into_iter().filter(|queue| queue.task_queue_id.starts_with(&prefix)));
                if done || past || all.len() >= MAX_QUEUES {
                    return Ok(all);
                }
                after = page.continuation;
            }
        })
        .await?;
    Ok(found)
}

fn provisioner_param(params: &Params) -> Result<String, ApiError> {
    let provisioner = params.0.get("provisioner").cloned().unwrap_or_default();
    if !shoal_engine::id::is_identifier(&provisioner) {
        return Err(ApiError::bad_argument(format!(
            "provisionerId `{provisioner}` must match ^[a-zA-Z0-9-_]{{1,38}}$"
        )));
    }
    Ok(provisioner)
}

/// A provisioner as its queues make it: active when the latest of them was, kept as long as
/// the last of them is.
fn provisioner_body(provisioner_id: &str, queues: &[TaskQueueInfo]) -> Value {
    let expires = queues.iter().map(|queue| queue.expires).max();
    let active = queues.iter().map(|queue| queue.last_date_active).max();
    json!({
        "provisionerId": provisioner_id,
        "stability": "experimental",
        "description": "",
        "expires": expires,
        "lastDateActive": active,
    })
}

fn worker_type_body(queue: &TaskQueueInfo) -> Value {
    let (provisioner_id, worker_type) = queue.task_queue_id.split_once('/').unwrap_or_default();
    json!({
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "taskQueueId": queue.task_queue_id,
        "stability": queue.stability,
        "description": queue.description,
        "expires": queue.expires,
        "lastDateActive": queue.last_date_active,
    })
}

/// Pages `items` (already in order, each with its token) after `paging`'s token.
fn paged(items: Vec<(String, Value)>, paging: &Paging) -> (Vec<Value>, Option<String>) {
    let after = paging.continuation.as_deref().unwrap_or("");
    let mut rest: Vec<(String, Value)> = items.into_iter().filter(|(token, _)| token.as_str() > after).collect();
    let more = rest.len() > paging.limit;
    rest.truncate(paging.limit);
    let continuation = if more { rest.last().map(|(token, _)| token.clone()) } else { None };
    (rest.into_iter().map(|(_, value)| value).collect(), continuation)
}

pub(crate) async fn list_provisioners(State(state): State<AppState>, paging: Paging) -> Result<Json<Value>, ApiError> {
    let all = queues(&state, String::new()).await?;
    let mut by_provisioner: Vec<(String, Vec<TaskQueueInfo>)> = Vec::new();
    for queue in all {
        let provisioner = queue.task_queue_id.split_once('/').unwrap_or_default().0.to_owned();
        match by_provisioner.last_mut() {
            Some((last, queues)) if *last == provisioner => queues.push(queue),
            _ => by_provisioner.push((provisioner, vec![queue])),
        }
    }
    let items = by_provisioner.iter().map(|(id, queues)| (id.clone(), provisioner_body(id, queues))).collect();
    let (provisioners, continuation) = paged(items, &paging);
    Ok(with_continuation(json!({ "provisioners": provisioners }), continuation))
}

pub(crate) async fn get_provisioner(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let provisioner = provisioner_param(&params)?;
    let found = queues(&state, format!("{provisioner}/")).await?;
    if found.is_empty() {
        return Err(ApiError::not_found(format!("provisioner {provisioner} not found")));
    }
    Ok(Json(provisioner_body(&provisioner, &found)))
}

pub(crate) async fn list_worker_types(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let provisioner = provisioner_param(&params)?;
    let found = queues(&state, format!("{provisioner}/")).await?;
    let items = found.iter().map(|queue| (queue.task_queue_id.clone(), worker_type_body(queue))).collect();
    let (worker_types, continuation) = paged(items, &paging);
    Ok(with_continuation(json!({ "workerTypes": worker_types }), continuation))
}

pub(crate) async fn get_worker_type(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = crate::routes::workers::queue_of(&params)?;
    let queue = task_queue_id.clone();
    let found = state.queue.store().read(move |reads| reads.task_queue(&queue)).await?;
    let found = found.ok_or_else(|| ApiError::not_found(format!("worker type {task_queue_id} not found")))?;
    Ok(Json(worker_type_body(&found)))
}
