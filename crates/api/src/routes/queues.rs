//! Task queues: counts, pending and claimed listings, and the queue registry.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shoal_engine::id::split_task_queue_id;
use shoal_store::{Page, QueueCounts, Reads, StoreError};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params};
use crate::routes::with_continuation;

pub(crate) async fn pending_tasks(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    let queue = task_queue_id.clone();
    let counts = state.queue.store().read(move |reads| reads.queue_counts(&queue)).await?;
    let (provisioner_id, worker_type) = task_queue_id.split_once('/').unwrap_or_default();
    Ok(Json(json!({
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "taskQueueId": task_queue_id,
        "pendingTasks": counts.pending_tasks,
    })))
}

/// A queue's counts in Taskcluster's shape (with the legacy provisionerId and workerType).
fn counts_body(task_queue_id: &str, counts: &QueueCounts) -> Value {
    let (provisioner_id, worker_type) = task_queue_id.split_once('/').unwrap_or_default();
    json!({
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "taskQueueId": task_queue_id,
        "pendingTasks": counts.pending_tasks,
        "claimedTasks": counts.claimed_tasks,
    })
}

pub(crate) async fn task_queue_counts(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    let queue = task_queue_id.clone();
    let counts = state.queue.store().read(move |reads| reads.queue_counts(&queue)).await?;
    Ok(Json(counts_body(&task_queue_id, &counts)))
}

/// Most queues one taskQueueCountsBatch may name (Taskcluster's schema).
const MAX_BATCH_QUEUES: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct QueueIds {
    task_queue_ids: Vec<String>,
}

pub(crate) async fn task_queue_counts_batch(
    State(state): State<AppState>,
    Body(body): Body<QueueIds>,
) -> Result<Json<Value>, ApiError> {
    if body.task_queue_ids.len() > MAX_BATCH_QUEUES {
        return Err(ApiError::invalid_input(format!("taskQueueIds: must have at most {MAX_BATCH_QUEUES} items")));
    }
    for (idx, id) in body.task_queue_ids.iter().enumerate() {
        if split_task_queue_id(id).is_none() {
            return Err(ApiError::invalid_input(format!(
                "taskQueueIds[{idx}]: `{id}` must match ^[a-zA-Z0-9-_]{{1,38}}/[a-z]([-a-z0-9]{{0,36}}[a-z0-9])?$"
            )));
        }
        if body.task_queue_ids[..idx].contains(id) {
            return Err(ApiError::invalid_input(format!("taskQueueIds[{idx}]: `{id}` is named twice")));
        }
    }
    let ids = body.task_queue_ids;
    let counts = state
        .queue
        .store()
        .read(move |reads| {
            ids.iter().map(|id| Ok((reads.queue_counts(id)?, id.clone()))).collect::<Result<Vec<_>, _>>()
        })
        .await?;
    let list: Vec<Value> = counts.iter().map(|(counts, id)| counts_body(id, counts)).collect();
    Ok(Json(json!({ "taskQueueCounts": list })))
}

/// A read listing the runs of a queue: (reads, queue, after, limit) -> page.
type QueueListing<T> = fn(&dyn Reads, &str, Option<&str>, usize) -> Result<Page<T>, StoreError>;

/// One of a queue's run listings (`list` picks which), in Taskcluster's envelope.
async fn queue_listing<T: Serialize + Send + 'static>(
    state: &AppState,
    params: &Params,
    paging: Paging,
    list: QueueListing<T>,
) -> Result<Json<Value>, ApiError> {
    let queue = params.task_queue_id()?;
    let page = state
        .queue
        .store()
        .read(move |reads| list(reads, &queue, paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(with_continuation(json!({ "tasks": page.items }), page.continuation))
}

pub(crate) async fn list_pending_tasks(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    queue_listing(&state, &params, paging, |reads, queue, after, limit| reads.list_pending(queue, after, limit)).await
}

pub(crate) async fn list_claimed_tasks(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    queue_listing(&state, &params, paging, |reads, queue, after, limit| reads.list_claimed(queue, after, limit)).await
}

pub(crate) async fn list_task_queues(State(state): State<AppState>, paging: Paging) -> Result<Json<Value>, ApiError> {
    let page = state
        .queue
        .store()
        .read(move |reads| reads.list_task_queues(paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(with_continuation(json!({ "taskQueues": page.items }), page.continuation))
}

pub(crate) async fn get_task_queue(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    let queue = task_queue_id.clone();
    let found = state.queue.store().read(move |reads| reads.task_queue(&queue)).await?;
    let found = found.ok_or_else(|| ApiError::not_found(format!("task queue {task_queue_id} not found")))?;
    Ok(Json(json!(found)))
}
