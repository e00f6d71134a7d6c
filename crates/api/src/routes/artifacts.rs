//! Artifacts: creating them, and serving them by run or from the latest run, as redirects,
//! content descriptions, listings and infos.

use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use shoal_engine::TaskId;
use shoal_engine::artifact::{Artifact, ArtifactKind, ArtifactRequest, check_name, follow_links, private_names};
use shoal_store::operation::CreateArtifact;
use shoal_store::{ArtifactKey, StoreError};

use crate::AppState;
use crate::auth::hawk::sign_url;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Paging, Params, RawBody, parse_json};
use crate::routes::with_continuation;

/// How long the upload URL of a blob artifact is valid (Taskcluster: 45 minutes).
const PUT_URL_VALID: Duration = Duration::from_secs(45 * 60);

fn artifact_name(params: &Params) -> Result<String, ApiError> {
    let name = params.0.get("name").cloned().unwrap_or_default();
    check_name(&name)?;
    Ok(name)
}

/// The URL of a blob's bytes on this server.
pub(crate) fn blob_url(root_url: &str, task_id: TaskId, run_id: u32, name: &str) -> String {
    // Everything but unreserved characters and `/` is escaped.
    const PATH: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    format!("{root_url}/blobs/v1/{task_id}/{run_id}/{}", percent_encoding::utf8_percent_encode(name, PATH))
}

/// How long a signed download URL works (Taskcluster's signed S3 URLs: 30 minutes).
const GET_URL_VALID: Duration = Duration::from_secs(30 * 60);

/// A blob's URL on this server signed for `method` until `valid` from now: the bewit lets
/// the holder read (or upload) that one blob and nothing else.
pub(crate) fn signed_blob_url(
    state: &AppState,
    method: &str,
    task_id: TaskId,
    run_id: u32,
    name: &str,
    valid: Duration,
) -> Result<String, ApiError> {
    let url = blob_url(&state.root_url, task_id, run_id, name);
    let parsed = url::Url::parse(&url).map_err(|_| StoreError::Settings(format!("unusable root URL {url}")))?;
    let host = parsed.host_str().unwrap_or_default();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let resource = &parsed[url::Position::BeforePath..];
    let signer = (shoal_engine::auth::QUEUE_CLIENT_ID, state.auth.signing_token());
    let signed = sign_url((host, port), method, resource, signer, SystemTime::now() + valid)
        .ok_or_else(|| StoreError::Internal("signing a URL".into()))?;
    Ok(format!("{}{signed}", &parsed[..url::Position::BeforePath]))
}

/// Where an artifact's content is: a blob (by a signed URL) or live log on this server, or
/// a reference's URL.
fn content_url(state: &AppState, task_id: TaskId, run_id: u32, artifact: &Artifact) -> Result<String, ApiError> {
    Ok(match &artifact.kind {
        ArtifactKind::Reference { url, .. } => url.clone(),
        ArtifactKind::LiveLog => format!("{}/logs/v1/{task_id}/{run_id}?follow=1", state.root_url),
        _ => signed_blob_url(state, "GET", task_id, run_id, &artifact.name, GET_URL_VALID)?,
    })
}

fn run_vars(params: &Params) -> Result<Vars, ApiError> {
    Ok(Vars::new().one("taskId", params.task_id()?).one("runId", params.run_id()?))
}

pub(crate) async fn create_artifact(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    let key = ArtifactKey { task_id: params.task_id()?, run_id: params.run_id()?, name: artifact_name(&params)? };
    caller.authorize(&run_vars(&params)?)?;
    if parse_json::<Value>(&body).is_ok_and(|value| value["storageType"] == "object") {
        return Err(ApiError::invalid_input(
            "storageType: `object` (Taskcluster's object service) is not offered by Shoal; use `s3`, \
             whose putUrl uploads the bytes to this server",
        ));
    }
    let request: ArtifactRequest = parse_json(&body)?;
    let (task_id, run_id, name) = (key.task_id, key.run_id, key.name.clone());
    let artifact = state.queue.run(CreateArtifact { key, request }).await?;
    let answer = match &artifact.kind {
        ArtifactKind::Blob { content_type, .. } => json!({
            "storageType": "s3",
            "contentType": content_type,
            "expires": shoal_service::now().plus_millis(PUT_URL_VALID.as_millis() as i64),
            "putUrl": signed_blob_url(&state, "PUT", task_id, run_id, &name, PUT_URL_VALID)?,
        }),
        other => json!({ "storageType": other.storage_type() }),
    };
    Ok(Json(answer))
}

/// finishArtifact: for a blob, confirms its bytes are complete.
pub(crate) async fn finish_artifact(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<StatusCode, ApiError> {
    let (task_id, run_id, name) = (params.task_id()?, params.run_id()?, artifact_name(&params)?);
    caller.authorize(&run_vars(&params)?)?;
    let found = state.queue.store().read(move |reads| reads.artifact(task_id, run_id, &name)).await?;
    match found {
        None => Err(ApiError::not_found("artifact not found")),
        Some(artifact) => {
            artifact.check_finished()?;
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// The run of the task that "latest" calls mean: its last one.
async fn latest_run(state: &AppState, task_id: TaskId) -> Result<u32, ApiError> {
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    record
        .status
        .runs
        .last()
        .map(|run| run.run_id)
        .ok_or_else(|| ApiError::not_found(format!("task {task_id} has no runs")))
}

/// Finds the artifact and follows its links within the run.
async fn resolve(state: &AppState, task_id: TaskId, run_id: u32, name: String) -> Result<Artifact, ApiError> {
    let found = state
        .queue
        .store()
        .read(move |reads| follow_links(&name, |current| reads.artifact(task_id, run_id, current)))
        .await?;
    Ok(found?)
}

/// The run an artifact read means: the named one, or the task's last; a run that Swarming's
/// dedup resolved reads through to the last run of the task whose completion stands for it.
pub(crate) async fn run_of(state: &AppState, params: &Params, latest: bool) -> Result<(TaskId, u32), ApiError> {
    let task_id = params.task_id()?;
    let named = if latest { None } else { Some(params.run_id()?) };
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    let run = match named {
        Some(run_id) => record.status.runs.get(run_id as usize),
        None => record.status.runs.last(),
    };
    match (run, named) {
        (Some(run), _) => match run.deduped_from {
            Some(original) => Ok((original, latest_run(state, original).await?)),
            None => Ok((task_id, run.run_id)),
        },
        // An unknown run: the read itself says it is not found.
        (None, Some(run_id)) => Ok((task_id, run_id)),
        (None, None) => Err(ApiError::not_found(format!("task {task_id} has no runs"))),
    }
}

fn storage_header(res: &mut Response, artifact: &Artifact) {
    res.headers_mut()
        .insert("x-taskcluster-artifact-storage-type", HeaderValue::from_static(artifact.kind.storage_type()));
}

/// The artifact a read names, once the caller may read it (and every link it leads through).
async fn readable(
    state: &AppState,
    caller: &Caller,
    params: &Params,
    latest: bool,
) -> Result<(TaskId, u32, Artifact), ApiError> {
    let name = artifact_name(params)?;
    // Private names are refused before anything is looked up, so that a refusal tells nothing.
    caller.authorize(&Vars::new().many("privateNames", private_names([name.as_str()])))?;
    let (task_id, run_id) = run_of(state, params, latest).await?;
    let artifact = resolve(state, task_id, run_id, name.clone()).await?;
    caller.authorize(&Vars::new().many("privateNames", private_names([name.as_str(), artifact.name.as_str()])))?;
    Ok((task_id, run_id, artifact))
}

/// 303 to the content (a blob on this server, or a reference's URL), 424 for an error artifact.
pub(crate) async fn redirect(
    state: AppState,
    caller: Caller,
    params: Params,
    latest: bool,
) -> Result<Response, ApiError> {
    let (task_id, run_id, artifact) = readable(&state, &caller, &params, latest).await?;
    let mut res = match &artifact.kind {
        ArtifactKind::Error { reason, message } => {
            (StatusCode::FAILED_DEPENDENCY, Json(json!({ "reason": reason, "message": message }))).into_response()
        }
        kind => {
            let url = content_url(&state, task_id, run_id, &artifact)?;
            let location =
                HeaderValue::from_str(&url).map_err(|_| StoreError::Internal("unusable artifact URL".into()))?;
            let body = Json(json!({ "storageType": kind.storage_type(), "url": url }));
            let mut res = (StatusCode::SEE_OTHER, body).into_response();
            res.headers_mut().insert(header::LOCATION, location);
            res
        }
    };
    storage_header(&mut res, &artifact);
    Ok(res)
}

pub(crate) async fn get_artifact(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Response, ApiError> {
    redirect(state, caller, params, false).await
}

pub(crate) async fn get_latest_artifact(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Response, ApiError> {
    redirect(state, caller, params, true).await
}

/// How to fetch the content, as JSON (the official clients' download helpers use this).
async fn content(state: AppState, caller: Caller, params: Params, latest: bool) -> Result<Json<Value>, ApiError> {
    let (task_id, run_id, artifact) = readable(&state, &caller, &params, latest).await?;
    Ok(Json(match &artifact.kind {
        ArtifactKind::Error { reason, message } => {
            json!({ "storageType": "error", "reason": reason, "message": message })
        }
        ArtifactKind::Reference { url, .. } => json!({ "storageType": "reference", "url": url }),
        _ => json!({
            "storageType": "s3",
            "url": signed_blob_url(&state, "GET", task_id, run_id, &artifact.name, GET_URL_VALID)?,
        }),
    }))
}

pub(crate) async fn artifact_content(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    content(state, caller, params, false).await
}

pub(crate) async fn latest_artifact_content(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    content(state, caller, params, true).await
}

fn info_body(artifact: &Artifact) -> Value {
    json!({
        "storageType": artifact.kind.storage_type(),
        "name": artifact.name,
        "expires": artifact.expires,
        "contentType": artifact.kind.content_type(),
    })
}

async fn info(state: AppState, params: Params, latest: bool) -> Result<Json<Value>, ApiError> {
    let (task_id, run_id) = run_of(&state, &params, latest).await?;
    let name = artifact_name(&params)?;
    let found = state.queue.store().read(move |reads| reads.artifact(task_id, run_id, &name)).await?;
    let artifact = found.ok_or_else(|| ApiError::not_found("artifact not found"))?;
    Ok(Json(info_body(&artifact)))
}

pub(crate) async fn artifact_info(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    info(state, params, false).await
}

pub(crate) async fn latest_artifact_info(
    State(state): State<AppState>,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    info(state, params, true).await
}

async fn list(state: AppState, params: Params, paging: Paging, latest: bool) -> Result<Json<Value>, ApiError> {
    let (task_id, run_id) = run_of(&state, &params, latest).await?;
    let page = state
        .queue
        .store()
        .read(move |reads| {
            let Some(record) = reads.task(task_id)? else { return Ok(None) };
            if record.status.runs.len() <= run_id as usize {
                return Ok(None);
            }
            reads.list_artifacts(task_id, run_id, paging.continuation.as_deref(), paging.limit).map(Some)
        })
        .await?;
    let page = page.ok_or_else(|| ApiError::not_found(format!("run {run_id} of task {task_id} not found")))?;
    let artifacts: Vec<Value> = page.items.iter().map(info_body).collect();
    Ok(with_continuation(json!({ "artifacts": artifacts }), page.continuation))
}

pub(crate) async fn list_artifacts(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    list(state, params, paging, false).await
}

pub(crate) async fn list_latest_artifacts(
    State(state): State<AppState>,
    params: Params,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    list(state, params, paging, true).await
}
