//! The server's own blob endpoint: where `putUrl`s and artifact redirects point. Bytes
//! stream to and from the blob store without being held in memory.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use shoal_blobs::BlobKey;
use shoal_engine::Rejection;
use shoal_engine::artifact::{Artifact, ArtifactKind};
use shoal_store::{ArtifactKey, StoreError};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::Params;

fn key_of(params: &Params) -> Result<ArtifactKey, ApiError> {
    let name = params.0.get("name").cloned().unwrap_or_default();
    shoal_engine::artifact::check_name(&name)?;
    Ok(ArtifactKey { task_id: params.task_id()?, run_id: params.run_id()?, name })
}

async fn blob_record(state: &AppState, key: &ArtifactKey) -> Result<Artifact, ApiError> {
    let (task_id, run_id, name) = (key.task_id, key.run_id, key.name.clone());
    let found = state.queue.store().read(move |reads| reads.artifact(task_id, run_id, &name)).await?;
    match found {
        Some(artifact) if matches!(artifact.kind, ArtifactKind::Blob { .. }) => Ok(artifact),
        Some(_) => Err(Rejection::Conflict(format!("artifact {} is not an upload", key.name)).into()),
        None => Err(ApiError::not_found(format!("artifact {} not found; create it first", key.name))),
    }
}

fn io_error(err: std::io::Error) -> ApiError {
    StoreError::Unavailable(format!("blob storage: {err}")).into()
}

/// Receives a blob artifact's bytes, then marks it uploaded.
pub(crate) async fn put_blob(
    State(state): State<AppState>,
    params: Params,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let key = key_of(&params)?;
    blob_record(&state, &key).await?;
    // Bytes, like records, may only change while the run takes artifacts.
    let task_id = key.task_id;
    let record = state.queue.store().read(move |reads| reads.task(task_id)).await?;
    let run = record
        .as_ref()
        .and_then(|record| record.status.runs.get(key.run_id as usize))
        .ok_or_else(|| ApiError::not_found(format!("run {} of task {} not found", key.run_id, key.task_id)))?;
    shoal_engine::artifact::check_run_takes_artifacts(run, shoal_service::now())?;
    let blob = BlobKey { task_id: key.task_id.as_str(), run_id: key.run_id, name: &key.name };
    let mut writer = state.queue.blobs().writer(&blob).await.map_err(io_error)?;
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| ApiError::invalid_input(format!("body: upload interrupted: {err}")))?;
        if let Some(data) = frame.data_ref() {
            writer.write(data).await.map_err(io_error)?;
        }
    }
    writer.finish().await.map_err(io_error)?;
    state.queue.artifact_uploaded(key).await?;
    Ok(StatusCode::OK)
}

/// Serves a blob artifact's bytes with its content type.
pub(crate) async fn get_blob(State(state): State<AppState>, params: Params) -> Result<Response, ApiError> {
    let key = key_of(&params)?;
    let artifact = blob_record(&state, &key).await?;
    let blob = BlobKey { task_id: key.task_id.as_str(), run_id: key.run_id, name: &key.name };
    let opened = state.queue.blobs().open(&blob).await.map_err(io_error)?;
    let Some((file, size)) = opened.filter(|_| artifact.present) else {
        return Err(ApiError::not_found(format!("artifact {} has not been uploaded", key.name)));
    };
    let stream = tokio_util::io::ReaderStream::new(file);
    let mut res = Body::from_stream(stream).into_response();
    let content_type = HeaderValue::from_str(artifact.kind.content_type())
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    res.headers_mut().insert(header::CONTENT_TYPE, content_type);
    res.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    Ok(res)
}
