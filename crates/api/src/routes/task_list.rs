//! Swarming's task list: tasks by tags or creator, newest first, filtered by queue, state,
//! creator and time, or what is pending or running now, fleet-wide; and the tasks that failed
//! (failed or exception), newest first, as the overview shows them.

use axum::Json;
use axum::extract::{Query, State};
use serde_json::{Value, json};
use shoal_engine::Timestamp;
use shoal_engine::id::split_task_queue_id;
use shoal_engine::status::TaskState;
use shoal_store::{FAILED_TAG, TagQuery};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::Paging;
use crate::routes::with_continuation;

/// The query a listing names: `tag` (`key:value`, repeated for tasks with every one) or
/// `createdBy` (a client id), and optionally `taskQueueId`, `state`, `since` and `until`
/// (RFC 3339); or, with neither tag nor creator, `state` pending or running: what waits or runs
/// now, fleet-wide or in one queue.
fn tag_query(query: Vec<(String, String)>) -> Result<TagQuery, ApiError> {
    let found = filters(query, true)?;
    if found.tag.is_empty() && found.created_by.is_none() && !is_live(&found) {
        return Err(ApiError::invalid_input(
            "tag: is required (key:value) unless createdBy is given, or state is pending or running \
             (what waits or runs now is listed fleet-wide)",
        ));
    }
    Ok(found)
}

/// Whether `query` lists what is pending or running now (by neither tag nor creator).
fn is_live(query: &TagQuery) -> bool {
    query.tag.is_empty()
        && query.created_by.is_none()
        && matches!(query.state, Some(TaskState::Pending | TaskState::Running))
}

/// The filters of a listing; `tag` only where `tagged`.
fn filters(query: Vec<(String, String)>, tagged: bool) -> Result<TagQuery, ApiError> {
    let mut found = TagQuery::default();
    for (key, value) in query {
        let time = |value: &str| {
            Timestamp::parse(value).ok_or_else(|| ApiError::invalid_input(format!("{key}: must be an RFC 3339 time")))
        };
        match key.as_str() {
            // Several tags: the first is read, the others filter what it lists.
            "tag" if tagged && value.contains(':') && found.tag.is_empty() => found.tag = value,
            "tag" if tagged && value.contains(':') => found.also.push(value),
            "tag" if tagged => return Err(ApiError::invalid_input("tag: must be key:value")),
            "taskQueueId" if split_task_queue_id(&value).is_some() => found.task_queue_id = Some(value),
            "taskQueueId" => return Err(ApiError::invalid_input("taskQueueId: must be provisionerId/workerType")),
            "state" => {
                found.state = Some(TaskState::from_name(&value).ok_or_else(|| {
                    ApiError::invalid_input(
                        "state: must be unscheduled, pending, running, completed, failed or exception",
                    )
                })?);
            }
            "createdBy" if !value.is_empty() => found.created_by = Some(value),
            "createdBy" => return Err(ApiError::invalid_input("createdBy: must be a client id")),
            "since" => found.since = Some(time(&value)?),
            "until" => found.until = Some(time(&value)?),
            "limit" | "continuationToken" => {}
            other => return Err(ApiError::invalid_input(format!("{other}: is not a parameter of this listing"))),
        }
    }
    Ok(found)
}

pub(crate) async fn list_tasks(
    State(state): State<AppState>,
    paging: Paging,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    listing(&state, tag_query(query)?, paging).await
}

/// A page of the tasks `query` selects, newest first.
async fn listing(state: &AppState, query: TagQuery, paging: Paging) -> Result<Json<Value>, ApiError> {
    let page = state
        .queue
        .store()
        .read(move |reads| reads.list_tagged(&query, paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(with_continuation(json!({ "tasks": page.items }), page.continuation))
}

pub(crate) async fn count_tasks(
    State(state): State<AppState>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let query = tag_query(query)?;
    if is_live(&query) {
        return Err(ApiError::invalid_input(
            "tag: is required to count (key:value) unless createdBy is given; a queue's counts say how many wait or run",
        ));
    }
    let count = state.queue.store().read(move |reads| reads.count_tagged(&query)).await?;
    Ok(Json(json!({ "count": count })))
}

/// `GET /tasks/failed`: tasks failed or resolved as exception, newest created first.
pub(crate) async fn list_failed_tasks(
    State(state): State<AppState>,
    paging: Paging,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let mut query = filters(query, false)?;
    if query.state.is_some_and(|state| !matches!(state, TaskState::Failed | TaskState::Exception)) {
        return Err(ApiError::invalid_input("state: must be failed or exception in this listing"));
    }
    FAILED_TAG.clone_into(&mut query.tag);
    listing(&state, query, paging).await
}

/// `GET /task-groups`: task groups, newest first.
pub(crate) async fn list_task_groups(State(state): State<AppState>, paging: Paging) -> Result<Json<Value>, ApiError> {
    let page = state
        .queue
        .store()
        .read(move |reads| reads.list_task_groups(paging.continuation.as_deref(), paging.limit))
        .await?;
    Ok(with_continuation(json!({ "taskGroups": page.items }), page.continuation))
}
