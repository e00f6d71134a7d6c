//! Task queues: counts, pending and claimed listings, and the queue registry.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::{Value, json};
use shoal_store::{Page, Reads, StoreError};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{Paging, Params};
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

pub(crate) async fn task_queue_counts(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let task_queue_id = params.task_queue_id()?;
    let queue = task_queue_id.clone();
    let counts = state.queue.store().read(move |reads| reads.queue_counts(&queue)).await?;
    Ok(Json(json!({
        "taskQueueId": task_queue_id,
        "pendingTasks": counts.pending_tasks,
        "claimedTasks": counts.claimed_tasks,
    })))
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
    let task_queue_id = params.task_queue_id()?;
    let queue = task_queue_id.clone();
    let page = state
        .queue
        .store()
        .read(move |reads| list(reads, &queue, paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(with_continuation(json!({ "taskQueueId": task_queue_id, "tasks": page.items }), page.continuation))
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
