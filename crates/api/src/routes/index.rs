//! The Index API's calls (`/api/index/v1`): finding, listing, inserting and deleting entries,
//! and redirecting to an artifact of an indexed task.

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use shoal_engine::index::{Entry, Namespace};
use shoal_engine::rejection::Missing;
use shoal_engine::{Rejection, TaskId, Timestamp};
use shoal_service::now;
use shoal_store::operation::{IndexTask, UnindexTask};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params};
use crate::routes::with_continuation;

/// Most namespaces one findTasksAtIndex call names.
const MAX_INDEXES: usize = 1000;

fn namespace(params: &Params) -> Result<Namespace, ApiError> {
    let text = params.0.get("namespace").map_or("", String::as_str);
    Ok(Namespace::parse("namespace", text)?)
}

/// An entry as the Index API shows it.
fn entry_body(namespace: &str, entry: &Entry) -> Value {
    json!({
        "namespace": namespace,
        "taskId": entry.task_id,
        "rank": entry.rank,
        "data": entry.data,
        "expires": entry.expires,
    })
}

fn not_indexed(namespace: &Namespace) -> ApiError {
    Rejection::from(Missing::Indexed(namespace.as_str().to_owned())).into()
}

/// The task indexed at `namespace` now.
async fn indexed(state: &AppState, namespace: Namespace) -> Result<Entry, ApiError> {
    let at = now();
    let lookup = namespace.clone();
    let found = state.queue.store().read(move |reads| reads.indexed(&lookup, at)).await?;
    found.ok_or_else(|| not_indexed(&namespace))
}

pub(crate) async fn find_task(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let namespace = namespace(&params)?;
    if namespace.as_str().is_empty() {
        return Err(not_indexed(&namespace));
    }
    let entry = indexed(&state, namespace.clone()).await?;
    Ok(Json(entry_body(namespace.as_str(), &entry)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Indexes {
    #[serde(default)]
    indexes: Vec<String>,
}

pub(crate) async fn find_tasks_at_index(
    State(state): State<AppState>,
    paging: Paging,
    Body(input): Body<Indexes>,
) -> Result<Json<Value>, ApiError> {
    if input.indexes.len() > MAX_INDEXES {
        return Err(Rejection::invalid("indexes", format!("may name at most {MAX_INDEXES} namespaces")).into());
    }
    let namespaces = input
        .indexes
        .iter()
        .enumerate()
        .map(|(i, text)| Namespace::parse(&format!("indexes[{i}]"), text))
        .collect::<Result<Vec<_>, _>>()?;
    let start: usize = match paging.continuation.as_deref() {
        None | Some("") => 0,
        Some(token) => token.parse().map_err(|_| {
            Rejection::invalid("continuationToken", "is not a token this listing issued (give the same indexes)")
        })?,
    };
    let (limit, at) = (paging.limit, now());
    let (found, next) = state
        .queue
        .store()
        .read(move |reads| {
            let mut found = Vec::new();
            for (i, namespace) in namespaces.iter().enumerate().skip(start) {
                if found.len() == limit {
                    return Ok((found, Some(i.to_string())));
                }
                if let Some(entry) = reads.indexed(namespace, at)? {
                    found.push(entry_body(namespace.as_str(), &entry));
                }
            }
            Ok((found, None))
        })
        .await?;
    Ok(with_continuation(json!({ "tasks": found }), next))
}

pub(crate) async fn list_namespaces(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let namespace = namespace(&params)?;
    let (limit, at) = (paging.limit, now());
    let page = state
        .queue
        .store()
        .read(move |reads| reads.namespaces_under(&namespace, paging.continuation.as_deref(), limit, at))
        .await?;
    let namespaces: Vec<Value> = page
        .items
        .iter()
        .map(|(namespace, expires)| {
            let name = namespace.rsplit('.').next().unwrap_or(namespace);
            json!({ "namespace": namespace, "name": name, "expires": expires })
        })
        .collect();
    Ok(with_continuation(json!({ "namespaces": namespaces }), page.continuation))
}

pub(crate) async fn list_tasks(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    let namespace = namespace(&params)?;
    let (limit, at) = (paging.limit, now());
    let page = state
        .queue
        .store()
        .read(move |reads| reads.indexed_under(&namespace, paging.continuation.as_deref(), limit, at))
        .await?;
    let tasks: Vec<Value> = page.items.iter().map(|(namespace, entry)| entry_body(namespace, entry)).collect();
    Ok(with_continuation(json!({ "tasks": tasks }), page.continuation))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct InsertTask {
    task_id: String,
    rank: i64,
    data: Map<String, Value>,
    expires: String,
}

pub(crate) async fn insert_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(input): Body<InsertTask>,
) -> Result<Json<Value>, ApiError> {
    let namespace = namespace(&params)?;
    caller.authorize(&Vars::new().one("namespace", namespace.as_str()))?;
    if namespace.as_str().is_empty() {
        return Err(Rejection::invalid("namespace", "must name at least one word").into());
    }
    let task_id = TaskId::parse(&input.task_id).ok_or_else(|| Rejection::invalid("taskId", "must be a slugid"))?;
    let expires = Timestamp::parse(&input.expires)
        .ok_or_else(|| Rejection::invalid("expires", "must be an RFC 3339 date-time"))?;
    let entry = Entry { task_id, rank: input.rank, data: input.data, expires };
    let stored = state.queue.run(IndexTask { namespace: namespace.clone(), entry }).await?;
    Ok(Json(entry_body(namespace.as_str(), &stored)))
}

pub(crate) async fn delete_task(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let namespace = namespace(&params)?;
    caller.authorize(&Vars::new().one("namespace", namespace.as_str()))?;
    state.queue.run(UnindexTask { namespace }).await?;
    Ok(Json(json!({})))
}

/// 303 to the artifact of the indexed task's latest run, checked as the queue's
/// getLatestArtifact checks it (a private name needs its `queue:get-artifact:` scope).
pub(crate) async fn find_artifact(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Response, ApiError> {
    let namespace = namespace(&params)?;
    let entry = indexed(&state, namespace).await?;
    let mut artifact = params.clone();
    artifact.0.insert("task_id".into(), entry.task_id.to_string());
    crate::routes::artifacts::redirect(state, caller, artifact, true).await
}
